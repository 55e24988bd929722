package mount

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/vault"
)

// With Options.Passthrough, a read-only open of a clean file reads from a
// backing file in the content cache: the kernel reads it directly. A
// change through the API, or through the mount, shows at the next open;
// a write beside an open reader works and commits.
func TestPassthrough(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	cache := t.TempDir()
	b, err := tree.OpenBacking(cache, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{Passthrough: b, QueueCloses: true})
	p := filepath.Join(m.Dir(), "f")
	big := pattern(3 << 20)
	if _, err := v.WriteFile(ctx, "/f", big, vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "first read", []byte(readFile(t, p)), big)
	if b.Bytes() != int64(len(big)) {
		t.Fatalf("content cache holds %d bytes, want %d", b.Bytes(), len(big))
	}

	// The kernel reads the backing file, not the mount: what is in it
	// is what a read returns (here changed behind everyone's back, to
	// tell the two apart).
	key, _, err := v.ContentKey(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	cf := filepath.Join(cache, key)
	os.Chmod(cf, 0o600)
	if err := os.WriteFile(cf, bytes.Repeat([]byte{'z'}, len(big)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); got[:3] != "zzz" {
		t.Fatalf("read through passthrough: got %q..., want the backing file's zzz", got[:3])
	}
	os.Remove(cf)

	// A change through the API shows at the next open.
	content := func(c byte) []byte { return bytes.Repeat([]byte{c}, tree.MinBacked+5) }
	if _, err := v.WriteFile(ctx, "/f", content('a'), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "after an API write", []byte(readFile(t, p)), content('a'))

	// While a descriptor reads through a backing file, the kernel ties
	// every open of the file to it: a write-open is refused (ETXTBSY),
	// a read-only open reads the same content, and a change made
	// meanwhile shows once they have all closed.
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		w.Close()
		t.Fatal("write-open beside a backed reader: succeeded, want ETXTBSY")
	} else {
		wantErrno(t, "write-open beside a backed reader", err, syscall.ETXTBSY)
	}
	if _, err := v.WriteFile(ctx, "/f", content('b'), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "open beside a backed reader after an API write", []byte(readFile(t, p)), content('a'))
	r.Close()
	// The kernel sends the close's RELEASE asynchronously: the mount
	// lets go of the old content once it arrives.
	poll.Until(t, 5*time.Second, "an open after the backed reader closed reads the new content", func() (bool, error) {
		return readFile(t, p) == string(content('b')), nil
	})
	if err := os.WriteFile(p, content('c'), 0o644); err != nil {
		t.Fatalf("write with no reader: %v", err)
	}
	equalBytes(t, "after a write through the mount", []byte(readFile(t, p)), content('c'))
	syncMount(t, m)
	equalBytes(t, "vault", []byte(vaultFile(t, v, "/f")), content('c'))

	// A sparse file's holes stay holes in its backing file.
	if _, err := v.WriteFile(ctx, "/sparse", []byte("x"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Truncate(ctx, "/sparse", 64<<20, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(m.Dir(), "sparse")); len(got) != 64<<20 || got[0] != 'x' {
		t.Fatalf("sparse file: %d bytes", len(got))
	}
	skey, _, err := v.ContentKey(ctx, "/sparse")
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(cache, skey), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; st.Size != 64<<20 || used > 1<<20 {
		t.Fatalf("backing file of a sparse file: size %d, %d bytes on disk; want 64 MiB, mostly holes", st.Size, used)
	}

	// Small files are served by the mount itself.
	small := filepath.Join(m.Dir(), "small")
	writeFile(t, small, "small")
	before := b.Bytes()
	if got := readFile(t, small); got != "small" {
		t.Fatalf("small file: got %q", got)
	}
	if b.Bytes() != before {
		t.Fatalf("content cache grew by %d bytes for a small file", b.Bytes()-before)
	}
}
