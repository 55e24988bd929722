package tree

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/avfs/avfs/vault"
)

// testVault creates vault default/v with quota q in a fresh store, closed
// when the test ends.
func testVault(t *testing.T, q vault.Quota) *vault.Vault {
	t.Helper()
	ctx := context.Background()
	s, err := vault.Open(ctx, filepath.Join(t.TempDir(), "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create(ctx, "default", "v", q, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	return s.Vault("default", "v")
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
