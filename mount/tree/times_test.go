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
	tr := testTree(t, v, Options{Poll: -1, QueueCloses: true, FlushDelay: time.Hour})
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
	clockPast(t, written.Mtime)
	if _, errno := tr.Link(ctx, e.ino, RootIno, "g"); errno != 0 {
		t.Fatal(errno)
	}
	linked := tr.Stat(e)
	if linked.Ctime <= written.Mtime || linked.Mtime != written.Mtime {
		t.Fatalf("after the link: mtime %d ctime %d; written at %d", linked.Mtime, linked.Ctime, written.Mtime)
	}
	clockPast(t, linked.Ctime)
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

// TestNewFileKeepsItsWriteTime: a file created, written a little later
// and closed, its create still queued, is made in the vault with its
// content: the file keeps the time of its last write, as the kernel was
// shown, and its directory the time of the create. Both when the close
// queues the content and when it commits it (a vault with a quota).
func TestNewFileKeepsItsWriteTime(t *testing.T) {
	for name, q := range map[string]vault.Quota{"no quota": {}, "a quota": {MaxFiles: ptr(int64(100))}} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			v := testVault(t, q)
			tr := testTree(t, v, Options{Poll: -1, QueueCloses: true, FlushDelay: time.Hour})
			e, errno := tr.Create(ctx, RootIno, "f", Spec{Kind: vault.KindFile, Perm: 0o644})
			if errno != 0 {
				t.Fatal(errno)
			}
			created := tr.Stat(tr.Root())
			f, _, errno := tr.Open(ctx, e, syscall.O_WRONLY)
			if errno != 0 {
				t.Fatal(errno)
			}
			clockPast(t, created.Mtime)
			if errno := tr.Write(ctx, f, []byte("content"), 0); errno != 0 {
				t.Fatal(errno)
			}
			written := tr.Stat(e)
			if errno := tr.Flush(ctx, f); errno != 0 {
				t.Fatal(errno)
			}
			tr.Release(ctx, f)
			if got := tr.Stat(e); got.Mtime != written.Mtime || got.Ctime != written.Ctime {
				t.Errorf("the tree after the close: mtime %d ctime %d, want %d", got.Mtime, got.Ctime, written.Mtime)
			}
			if err := tr.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := v.Stat(ctx, "/f")
			if err != nil {
				t.Fatal(err)
			}
			if st.Mtime.UnixNano() != written.Mtime || st.Ctime.UnixNano() != written.Mtime {
				t.Errorf("vault /f: mtime %d ctime %d, want the write's %d (created at %d)", st.Mtime.UnixNano(), st.Ctime.UnixNano(), written.Mtime, created.Mtime)
			}
			root, err := v.Stat(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			if root.Mtime.UnixNano() != created.Mtime {
				t.Errorf("vault /: mtime %d, want the create's %d", root.Mtime.UnixNano(), created.Mtime)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
