package mount

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/vault"
)

// TestSparseHugeFile is the crash from the issue: truncate(1) to
// 999999999999999 bytes, or a one-byte write at that offset, made the
// mount process allocate a chunk list for the whole length and die. Now
// a hole costs nothing: the mount stays up, and the file reads back.
func TestSparseHugeFile(t *testing.T) {
	const huge = 999999999999999
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	f := filepath.Join(m.Dir(), "f")
	writeFile(t, f, "head")
	if out, err := exec.Command("truncate", "-s", "999999999999999", f).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	g := filepath.Join(m.Dir(), "g")
	// dd seeks and writes one byte, as the second case does.
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+g, "bs=1", "count=1", "seek=999999999999998", "conv=notrunc").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}
	fd, err := os.OpenFile(g, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt([]byte("x"), huge-1); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatalf("close (commit): %v", err)
	}
	for _, p := range []string{f, g} {
		st, err := os.Stat(p)
		if err != nil || st.Size() != huge {
			t.Fatalf("stat %s: %v, %v; want size %d", p, st, err, huge)
		}
	}
	fd, err = os.Open(g)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	buf := make([]byte, 4)
	if n, err := fd.ReadAt(buf, huge-4); n != 4 || !bytes.Equal(buf, []byte("\x00\x00\x00x")) {
		t.Fatalf("read the end of g: %q, %v", buf[:n], err)
	}
	if n, err := fd.ReadAt(buf, huge/3); n != 4 || !bytes.Equal(buf, make([]byte, 4)) {
		t.Fatalf("read the middle of g: %q, %v", buf[:n], err)
	}
	if got := readFileHead(t, f, 6); got != "head\x00\x00" {
		t.Fatalf("read the start of f: %q", got)
	}
	info, err := v.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.StoredBytes > 2*vault.ChunkSize {
		t.Fatalf("stored bytes %d: holes were stored", info.StoredBytes)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(m.Dir(), &sfs); err != nil || sfs.Bavail == 0 {
		t.Fatalf("statfs after huge sparse files: %+v, %v; want free space left", sfs, err)
	}
}

// TestMaxFileSizeEFBIG: past the store's largest file size, truncate and
// write fail cleanly with EFBIG and the file keeps its content.
func TestMaxFileSizeEFBIG(t *testing.T) {
	v, _ := storeVault(t, vault.Quota{}, vault.Options{MaxFileSize: 1 << 40})
	m := mountVault(t, v, Options{})
	f := filepath.Join(m.Dir(), "f")
	writeFile(t, f, "keep")
	wantErrno(t, "truncate -s 1P", os.Truncate(f, 1<<50), syscall.EFBIG)
	fd, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fd.WriteAt([]byte("x"), 1<<41)
	fd.Close()
	wantErrno(t, "write at 2 TiB", err, syscall.EFBIG)
	if got := readFile(t, f); got != "keep" {
		t.Fatalf("after refused growth: %q", got)
	}
	if err := os.Truncate(f, 1<<40); err != nil {
		t.Fatalf("truncate to exactly the limit: %v", err)
	}
}

func readFileHead(t *testing.T, p string, n int) string {
	t.Helper()
	fd, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	buf := make([]byte, n)
	k, err := fd.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:k])
}

// TestSurvivesPanic: a request whose handler panics (an injected fault:
// nothing can make one panic for real) fails with EIO, and the mount
// goes on serving every other request.
func TestSurvivesPanic(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{panicOn: "boom"})
	writeFile(t, filepath.Join(m.Dir(), "before"), "x")
	for range 3 {
		_, err := os.Stat(filepath.Join(m.Dir(), "boom"))
		wantErrno(t, "stat of the name whose lookup panics", err, syscall.EIO)
	}
	writeFile(t, filepath.Join(m.Dir(), "after"), "y")
	if got := readFile(t, filepath.Join(m.Dir(), "before")) + readFile(t, filepath.Join(m.Dir(), "after")); got != "xy" {
		t.Fatalf("after the panics: %q", got)
	}
}

// TestBufferedWritesBounded: writes buffered in many open files together
// stay bounded (files commit early past 4×MaxDirty in all), and an
// unlinked file's writes, which go nowhere, fail with ENOSPC past 64 MiB
// instead of growing the process.
func TestBufferedWritesBounded(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{MaxDirty: 1 << 20})
	chunk := pattern(900 << 10)
	var fds []*os.File
	for i := range 6 {
		fd, err := os.Create(filepath.Join(m.Dir(), "f"+string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		if _, err := fd.Write(chunk); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	if got := m.t.Buffered(); got > 5<<20 {
		t.Fatalf("%d bytes buffered in six open files, want at most about 4 MiB", got)
	}
	committed := 0
	for i := range fds {
		if st, err := v.Stat(context.Background(), "/f"+string(rune('0'+i))); err == nil && st.Size == int64(len(chunk)) {
			committed++
		}
	}
	if committed == 0 {
		t.Fatal("no file was committed early")
	}

	fd, err := os.Create(filepath.Join(m.Dir(), "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := os.Remove(filepath.Join(m.Dir(), "tmp")); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	var werr error
	for range 80 {
		if _, werr = fd.Write(big); werr != nil {
			break
		}
	}
	wantErrno(t, "write 80 MiB to an unlinked file", werr, syscall.ENOSPC)
}

// TestSeekHolesThroughMount: SEEK_DATA and SEEK_HOLE on a mounted sparse
// file find its content, so that tools that copy sparse files skip the
// holes.
func TestSeekHolesThroughMount(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	f := filepath.Join(m.Dir(), "f")
	writeFile(t, f, "head")
	const end = 1 << 40
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+f, "bs=1", "count=1", "seek="+strconv.Itoa(end-1), "conv=notrunc").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}
	fd, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if at, err := unix.Seek(int(fd.Fd()), 0, unix.SEEK_HOLE); err != nil || at != vault.ChunkSize {
		t.Fatalf("SEEK_HOLE from 0: %d, %v; want %d", at, err, vault.ChunkSize)
	}
	if at, err := unix.Seek(int(fd.Fd()), vault.ChunkSize, unix.SEEK_DATA); !errors.Is(err, syscall.ENXIO) {
		t.Fatalf("SEEK_DATA in the hole (the last byte written is a zero): %d, %v; want ENXIO", at, err)
	}
}
