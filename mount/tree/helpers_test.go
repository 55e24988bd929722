package tree

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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

// testTree opens a tree on v with o, closed when the test ends.
func testTree(t *testing.T, v *vault.Vault, o Options) *Tree {
	t.Helper()
	tr, err := New(context.Background(), v, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// clockPast waits until the clock reads at least a millisecond past
// stamp (Unix nanoseconds), so that what the test does next gets a
// later time than what it did before, on any clock granularity.
func clockPast(t *testing.T, stamp int64) {
	t.Helper()
	target := time.Unix(0, stamp+int64(time.Millisecond))
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(target) {
		if time.Now().After(deadline) {
			t.Fatalf("the clock did not pass %d within a second", stamp)
		}
		time.Sleep(time.Until(target)) // exactly what is left, then look again
	}
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
