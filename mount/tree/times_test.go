package tree

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/vault"
)

// TestLateCloseKeepsTheShownTimes: the kernel sends a close (RELEASE)
// after close(2) has returned, so the tree may get it after the process
// went on to link the file. The file then keeps the times the kernel was
// shown: its last write's as its modification time and the link's as its
// change time, in the tree and in the vault; the close moves neither.
func TestLateCloseKeepsTheShownTimes(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	if _, err := v.WriteFile(ctx, "/f", []byte("old"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	tr, err := New(ctx, v, Options{Poll: -1, QueueCloses: true, FlushDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	e, errno := tr.Lookup(ctx, tr.Root(), "f")
	if errno != 0 {
		t.Fatal(errno)
	}
	f, _, errno := tr.Open(ctx, e, syscall.O_WRONLY)
	if errno != 0 {
		t.Fatal(errno)
	}
	if errno := tr.Write(ctx, f, []byte("new content"), 0); errno != 0 {
		t.Fatal(errno)
	}
	written := tr.Stat(e)
	time.Sleep(2 * time.Millisecond)
	if _, errno := tr.Link(ctx, e.ino, RootIno, "g"); errno != 0 {
		t.Fatal(errno)
	}
	linked := tr.Stat(e)
	if linked.Ctime <= written.Mtime || linked.Mtime != written.Mtime {
		t.Fatalf("after the link: mtime %d ctime %d; written at %d", linked.Mtime, linked.Ctime, written.Mtime)
	}
	time.Sleep(2 * time.Millisecond)
	tr.Release(ctx, f)

	if got := tr.Stat(e); got.Mtime != written.Mtime || got.Ctime != linked.Ctime {
		t.Errorf("the tree after the close: mtime %d ctime %d, want %d and %d", got.Mtime, got.Ctime, written.Mtime, linked.Ctime)
	}
	if err := tr.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/f", "/g"} {
		st, err := v.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mtime.UnixNano() != written.Mtime || st.Ctime.UnixNano() != linked.Ctime {
			t.Errorf("vault %s: mtime %d ctime %d, want %d and %d", p, st.Mtime.UnixNano(), st.Ctime.UnixNano(), written.Mtime, linked.Ctime)
		}
		if data, _, err := v.ReadFile(ctx, p); err != nil || string(data) != "new content" {
			t.Errorf("vault %s: %q, %v", p, data, err)
		}
	}
}
