package mount

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
	// The backing file is checked back in when the kernel's RELEASE
	// arrives, just after close(2) returned.
	poll.Until(t, 5*time.Second, "the content cache holding the file", func() (bool, error) {
		return b.Bytes() == int64(len(big)), nil
	})

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
	poll.Until(t, 5*time.Second, "the changed backing file checked back in", func() (bool, error) {
		_, err := os.Stat(cf)
		return err == nil, nil
	})
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
	// every open of the file to it. It is private to the file, so a
	// change through the API is copied into it: the open reader, and a
	// new open, read the new content at once.
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := v.WriteFile(ctx, "/f", content('b'), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "open beside a backed reader after an API write", []byte(readFile(t, p)), content('b'))
	got := make([]byte, len(content('b')))
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "the backed reader after an API write", got, content('b'))
	r.Close()
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

// passthroughMount mounts a vault with a content cache of its own.
func passthroughMount(t *testing.T, v *vault.Vault, cache string) (*Mount, *tree.Backing) {
	t.Helper()
	b, err := tree.OpenBacking(cache, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return mountVault(t, v, Options{Passthrough: b, QueueCloses: true}), b
}

// writeVault writes p in the vault and brings m up to date.
func writeVault(t *testing.T, v *vault.Vault, m *Mount, p string, data []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := v.WriteFile(ctx, p, data, vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}

// readAll reads f from its start.
func readAll(t *testing.T, f *os.File) []byte {
	t.Helper()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && len(buf) > 0 {
		t.Fatalf("read %s: %v", f.Name(), err)
	}
	return buf
}

// What users do to a large file while something reads it through a
// backing file: copy over it, append, truncate, map it. Every write-open
// works, and every descriptor, the reader's included, sees the writes at
// once, as on a local disk; the vault gets them at close.
func TestPassthroughWritesBesideAReader(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m, _ := passthroughMount(t, v, t.TempDir())
	p := filepath.Join(m.Dir(), "big")
	first := pattern(2 << 20)
	writeVault(t, v, m, "/big", first)

	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	equalBytes(t, "reader", readAll(t, r), first)

	// cp over it: O_WRONLY|O_TRUNC, then writes.
	second := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16)
	if err := os.WriteFile(p, second, 0o644); err != nil {
		t.Fatalf("write-open beside a backed reader: %v", err)
	}
	equalBytes(t, "reader after cp over the file", readAll(t, r), second)
	equalBytes(t, "new open after cp", []byte(readFile(t, p)), second)
	equalBytes(t, "vault after cp", []byte(vaultFile(t, v, "/big")), second)

	// >> appends.
	a, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("append-open beside a backed reader: %v", err)
	}
	if _, err := a.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != int64(len(second)+4) {
		t.Fatalf("stat after an append: %v, %v; want size %d", st, err, len(second)+4)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(second), "tail"...)
	equalBytes(t, "reader after an append", readAll(t, r), want)
	equalBytes(t, "vault after an append", []byte(vaultFile(t, v, "/big")), want)

	// truncate(2) by path.
	if err := os.Truncate(p, 1<<20); err != nil {
		t.Fatalf("truncate beside a backed reader: %v", err)
	}
	equalBytes(t, "reader after truncate", readAll(t, r), want[:1<<20])
	equalBytes(t, "vault after truncate", []byte(vaultFile(t, v, "/big")), want[:1<<20])

	// A shared writable mapping writes the same bytes the reader reads.
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(w.Fd()), 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap of a backed file: %v", err)
	}
	copy(mem, "mapped")
	if got := make([]byte, 6); func() bool { r.ReadAt(got, 0); return string(got) != "mapped" }() {
		t.Fatalf("reader after a write through a shared mapping: got %q, want mapped", got)
	}
	syscall.Munmap(mem)
	w.Close()
	r.Close()
	poll.Until(t, 5*time.Second, "the mapped write reaches the vault at release", func() (bool, error) {
		return vaultFile(t, v, "/big")[:6] == "mapped", nil
	})

	// After the last close, the next open reads through a backing file
	// again, with the committed content.
	equalBytes(t, "open after all closed", []byte(readFile(t, p))[6:], want[6:1<<20])
}

// A program being executed cannot be opened for writing (ETXTBSY, as on
// Linux); a backed reader of the binary changes nothing to that, and once
// the program ends the binary can be replaced.
func TestPassthroughExecutable(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m, _ := passthroughMount(t, v, t.TempDir())
	self, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := append(self, make([]byte, max(0, tree.MinBacked-len(self)))...) // padded past MinBacked: still runs
	p := filepath.Join(m.Dir(), "sleep")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Through sh: a child of the serving process exec'ing a file of its
	// mount deadlocks with the Go runtime (vfork), go-fuse's known issue.
	cmd := exec.Command("/bin/sh", "-c", `exec "$0" 30`, p)
	if err := cmd.Start(); err != nil {
		t.Fatalf("exec of a backed binary: %v", err)
	}
	defer cmd.Process.Kill()
	poll.Until(t, 10*time.Second, "the program running", func() (bool, error) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
		return exe == p, nil
	})
	_, err = os.OpenFile(p, os.O_WRONLY, 0)
	wantErrno(t, "write-open of a running program", err, syscall.ETXTBSY)
	cmd.Process.Kill()
	cmd.Wait()
	if err := exec.Command("/bin/sh", "-c", `exec "$0" 0`, p).Run(); err != nil {
		t.Fatalf("second run: %v", err)
	}
	poll.Until(t, 5*time.Second, "write-open once the program ended", func() (bool, error) {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			w.Close()
		}
		return err == nil, nil
	})
}

// Two vaults forked from one another, mounted at once, read the same
// content through one content cache; a write in one does not reach the
// other, whose reader keeps its bytes.
func TestPassthroughForks(t *testing.T) {
	ctx := context.Background()
	s, err := vault.Open(ctx, filepath.Join(t.TempDir(), "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create(ctx, "default", "v", vault.Quota{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("default", "v")
	big := pattern(3 << 20)
	if _, err := v.WriteFile(ctx, "/f", big, vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "v", "fork", "", vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	fork := s.Vault("default", "fork")
	cache := t.TempDir()
	b, err := tree.OpenBacking(cache, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	m1 := mountVault(t, v, Options{Passthrough: b, QueueCloses: true})
	m2 := mountVault(t, fork, Options{Passthrough: b, QueueCloses: true})
	r1, err := os.Open(filepath.Join(m1.Dir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := os.Open(filepath.Join(m2.Dir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	equalBytes(t, "vault's reader", readAll(t, r1), big)
	equalBytes(t, "fork's reader", readAll(t, r2), big)
	if err := os.WriteFile(filepath.Join(m1.Dir(), "f"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "vault's reader after its write", readAll(t, r1), []byte("changed"))
	equalBytes(t, "fork's reader after the vault's write", readAll(t, r2), big)
	equalBytes(t, "fork", []byte(vaultFile(t, fork, "/f")), big)
	r1.Close()
	r2.Close()
	equalBytes(t, "fork's next open", []byte(readFile(t, filepath.Join(m2.Dir(), "f"))), big)
	// Once released, the cache holds the common content once (a file
	// that was open for writing is not put back: a shared mapping may
	// still write it).
	poll.Until(t, 5*time.Second, "content cache holding the common content once", func() (bool, error) {
		return b.Bytes() == int64(len(big)), nil
	})
}
