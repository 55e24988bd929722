package vault

import "testing"

// TestModelLazyLists runs the model test with every chunk list of more
// than one hash left in the database by path walks (node.lazy), so that
// partial writes, truncates, appends, copies and copy-on-write of large
// files, which only files over 2 MiB reach otherwise, are checked against
// the model on small files.
func TestModelLazyLists(t *testing.T) {
	defer func(n int64) { lazyListBytes = n }(lazyListBytes)
	lazyListBytes = hashLen
	TestModel(t)
}
