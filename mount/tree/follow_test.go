package tree

import (
	"context"
	"syscall"
	"testing"

	"github.com/avfs/avfs/vault"
)

// A directory made through the tree before its parent was ever listed
// (a create that commits at once, as with a max_files quota or without
// queued closes) still shows what another writer puts in it: a catch-up
// finds the directories to read again from the root down.
func TestCatchUpInDirectoryMadeUnderUnlistedParent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		quota vault.Quota
		o     Options
	}{
		{"no queued closes", vault.Quota{}, Options{Poll: -1}},
		{"max_files quota", vault.Quota{MaxFiles: new(int64(100))}, Options{Poll: -1, QueueCloses: true}},
		{"queued closes", vault.Quota{}, Options{Poll: -1, QueueCloses: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			v := testVault(t, tc.quota)
			tr := testTree(t, v, tc.o)
			d, errno := tr.Create(ctx, tr.Root().Ino(), "a", Spec{Kind: vault.KindDir, Perm: 0o755})
			if errno != 0 {
				t.Fatal(errno)
			}
			if err := tr.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := v.WriteFile(ctx, "/a/b", []byte("x"), vault.WriteOptions{}, vault.Meta{}); err != nil {
				t.Fatal(err)
			}
			if err := tr.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if _, errno := tr.Lookup(ctx, d, "b"); errno != 0 {
				t.Fatalf("lookup /a/b, written behind the tree's back, after a catch-up: %v", errno)
			}
			if _, errno := tr.Create(ctx, d.Ino(), "b", Spec{Kind: vault.KindFile, Perm: 0o644}); errno != syscall.EEXIST {
				t.Fatalf("create /a/b over the file written behind the tree's back: errno %v, want EEXIST", errno)
			}
		})
	}
}
