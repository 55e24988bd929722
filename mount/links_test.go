package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
)

// TestHardLinks: link(2) through the mount makes one inode with two
// names, in the mount and in the vault; a write through one shows
// through the other; unlink and rename over one name keep the other;
// links made behind the mount's back show within the poll.
func TestHardLinks(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "d", "b")
	writeFile(t, a, "one")
	if err := os.Link(a, b); err != nil {
		t.Fatalf("link: %v", err)
	}
	sa, sb := statT(t, a), statT(t, b)
	if sa.Ino != sb.Ino || sa.Nlink != 2 || sb.Nlink != 2 {
		t.Fatalf("after link: ino %d/%d, nlink %d/%d", sa.Ino, sb.Ino, sa.Nlink, sb.Nlink)
	}
	wantErrno(t, "link over an existing name", os.Link(a, b), syscall.EEXIST)
	wantErrno(t, "link of a directory", os.Link(filepath.Join(dir, "d"), filepath.Join(dir, "d2")), syscall.EPERM)

	// A write through one name, read through the other, in the mount
	// and in the vault.
	writeFile(t, b, "two")
	if got := readFile(t, a); got != "two" {
		t.Fatalf("read a after writing b: %q", got)
	}
	syncMount(t, m)
	if got := vaultFile(t, v, "/a"); got != "two" {
		t.Fatalf("vault /a: %q", got)
	}
	if e, err := v.Stat(ctx, "/d/b"); err != nil || e.Nlink != 2 || uint64(e.Ino) != sa.Ino {
		t.Fatalf("vault stat /d/b: %+v, %v", e, err)
	}
	names, err := os.ReadDir(dir)
	if err != nil || len(names) != 2 {
		t.Fatalf("root lists %v, %v; want a and d", names, err)
	}

	// Unlink one name: the other keeps the content, with one link.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if st := statT(t, b); st.Nlink != 1 {
		t.Fatalf("nlink after unlink: %d", st.Nlink)
	}
	if got := readFile(t, b); got != "two" {
		t.Fatalf("read b after unlinking a: %q", got)
	}
	// Rename over a name of a linked file takes one link off it.
	c := filepath.Join(dir, "c")
	if err := os.Link(b, c); err != nil {
		t.Fatal(err)
	}
	writeFile(t, a, "new")
	if err := os.Rename(a, c); err != nil {
		t.Fatal(err)
	}
	if st := statT(t, b); st.Nlink != 1 {
		t.Fatalf("nlink after rename over the other name: %d", st.Nlink)
	}
	if readFile(t, c) != "new" || readFile(t, b) != "two" {
		t.Fatalf("after rename: c %q, b %q", readFile(t, c), readFile(t, b))
	}

	// A link made through the vault API shows in the mount.
	if err := v.Link(ctx, "/d/b", "/e", vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	e := filepath.Join(dir, "e")
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var st syscall.Stat_t
		if err := syscall.Lstat(e, &st); err != nil {
			return err
		}
		if st.Ino != sb.Ino || st.Nlink != 2 {
			return fmt.Errorf("e: ino %d nlink %d, want %d and 2", st.Ino, st.Nlink, sb.Ino)
		}
		return nil
	})
	if got := readFile(t, e); got != "two" {
		t.Fatalf("read e: %q", got)
	}
}

// TestRenameExchange: renameat2 with RENAME_EXCHANGE swaps a file and a
// directory atomically, in the mount and the vault.
func TestRenameExchange(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	f, d := filepath.Join(dir, "f"), filepath.Join(dir, "sub", "d")
	if err := os.MkdirAll(filepath.Join(d, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f, "file")
	if err := unix.Renameat2(unix.AT_FDCWD, f, unix.AT_FDCWD, d, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("renameat2 exchange: %v", err)
	}
	if got := readFile(t, d); got != "file" {
		t.Fatalf("read %s: %q", d, got)
	}
	if _, err := os.Stat(filepath.Join(f, "inner")); err != nil {
		t.Fatalf("the directory under its new name: %v", err)
	}
	if st := statT(t, dir); st.Nlink != 4 { // ., .., sub, f
		t.Fatalf("root nlink %d, want 4", st.Nlink)
	}
	if st := statT(t, filepath.Join(dir, "sub")); st.Nlink != 2 {
		t.Fatalf("sub nlink %d, want 2", st.Nlink)
	}
	err := unix.Renameat2(unix.AT_FDCWD, f, unix.AT_FDCWD, filepath.Join(dir, "missing"), unix.RENAME_EXCHANGE)
	wantErrno(t, "exchange with a missing name", err, syscall.ENOENT)
	syncMount(t, m)
	if got := vaultFile(t, v, "/sub/d"); got != "file" {
		t.Fatalf("vault /sub/d: %q", got)
	}
}

// TestTmpfile: a file opened with O_TMPFILE has no name until linkat
// gives it one, with what was written; closed unlinked it leaves nothing.
func TestTmpfile(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		t.Fatalf("open O_TMPFILE: %v", err)
	}
	if _, err := unix.Write(fd, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Nlink != 0 || st.Size != 5 {
		t.Fatalf("fstat of the unnamed file: %+v, %v", st, err)
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
		t.Fatalf("the unnamed file shows: %v, %v", names, err)
	}
	name := filepath.Join(dir, "named")
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Fatalf("linkat: %v", err)
	}
	if _, err := unix.Write(fd, []byte(" world")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, name); got != "hello world" {
		t.Fatalf("read the linked file: %q", got)
	}
	syncMount(t, m)
	if got := vaultFile(t, v, "/named"); got != "hello world" {
		t.Fatalf("vault /named: %q", got)
	}
	if a := statT(t, name); a.Mode&0o777 != 0o640 || a.Nlink != 1 || a.Ino != st.Ino {
		t.Fatalf("stat of the linked file: mode %o nlink %d ino %d, want 640, 1, %d", a.Mode, a.Nlink, a.Ino, st.Ino)
	}

	// Never linked: nothing stays.
	fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("scratch")); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	syncMount(t, m)
	if list, err := v.ReadDir(context.Background(), "/"); err != nil || len(list) != 1 {
		t.Fatalf("vault root after an unlinked O_TMPFILE: %+v, %v", list, err)
	}
}

// TestTmpfileBounded: an unnamed file lives in memory, so linkat refuses
// one past tree.MaxOrphan (ENOSPC) however it got its size: ftruncate or a
// write far out cost nothing while holes, but the link would allocate
// the whole size (a command could make the mount allocate gigabytes).
func TestTmpfileBounded(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	for i, grow := range []func(fd int) error{
		func(fd int) error { return unix.Ftruncate(fd, tree.MaxOrphan+1) },
		func(fd int) error { _, err := unix.Pwrite(fd, []byte("x"), tree.MaxOrphan); return err },
	} {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
		if err != nil {
			t.Fatalf("open O_TMPFILE: %v", err)
		}
		if err := grow(fd); err != nil {
			t.Fatalf("case %d: grow the unnamed file: %v", i, err)
		}
		name := filepath.Join(dir, fmt.Sprintf("big%d", i))
		err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
		unix.Close(fd)
		if !errors.Is(err, unix.ENOSPC) {
			t.Errorf("case %d: linkat of an unnamed file past %d bytes: %v, want ENOSPC", i, tree.MaxOrphan, err)
		}
	}
	syncMount(t, m)
	if list, err := v.ReadDir(context.Background(), "/"); err != nil || len(list) != 0 {
		t.Fatalf("vault root after refused links: %+v, %v", list, err)
	}
}

// TestLinkThenUnlink: git puts each object in place with link(2) of its
// temporary file and unlink(2) of the temporary name. With closes queued
// the pair reaches the vault as a rename (renameQueued), and leaves what
// the pair leaves: one name, one link, the inode number, and the times
// the mount showed, which a new mount shows again. A link into another
// directory, or one whose names are used in between, stays a link.
func TestLinkThenUnlink(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{QueueCloses: true, flushDelay: time.Hour})
	dir := m.Dir()
	for _, d := range []string{"objects/ab", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	syncMount(t, m)
	pos, err := v.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(tmp, obj, content string, between func()) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, tmp), []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, tmp), filepath.Join(dir, obj)); err != nil {
			t.Fatal(err)
		}
		if between != nil {
			between()
		}
		if err := os.Remove(filepath.Join(dir, tmp)); err != nil {
			t.Fatal(err)
		}
	}
	put("objects/ab/tmp_1", "objects/ab/cdef", "blob one", nil)
	put("objects/ab/tmp_2", "other/moved", "blob two", nil)
	put("objects/ab/tmp_3", "objects/ab/0123", "blob three", func() {
		if err := os.Chmod(filepath.Join(dir, "objects/ab/0123"), 0o400); err != nil {
			t.Fatal(err)
		}
	})
	paths := []string{"objects/ab/cdef", "other/moved", "objects/ab/0123", "objects/ab", "other"}
	shown := map[string]syscall.Stat_t{}
	for _, p := range paths {
		st := statT(t, filepath.Join(dir, p))
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR && st.Nlink != 1 {
			t.Fatalf("%s: %d links after the unlink of the other name, want 1", p, st.Nlink)
		}
		shown[p] = *st
	}
	syncMount(t, m)
	es, err := v.Log(ctx, pos.Vault, pos.Last, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		if e.Action == "rename" || e.Action == "link" || e.Action == "remove" {
			got = append(got, e.Action+" "+e.Path)
		}
	}
	want := []string{"rename /objects/ab/tmp_1", "link /objects/ab/tmp_2", "remove /objects/ab/tmp_2", "link /objects/ab/tmp_3", "remove /objects/ab/tmp_3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("vault log: %q, want %q", got, want)
	}
	for i, p := range paths[:3] {
		if got := vaultFile(t, v, "/"+p); got != []string{"blob one", "blob two", "blob three"}[i] {
			t.Errorf("vault %s: %q", p, got)
		}
	}
	// A new mount of the vault shows what the first one showed.
	m2 := mountVault(t, v, Options{})
	for _, p := range paths {
		a, b := shown[p], statT(t, filepath.Join(m2.Dir(), p))
		if a.Ino != b.Ino || a.Nlink != b.Nlink || a.Mode != b.Mode || a.Size != b.Size || a.Mtim != b.Mtim || a.Ctim != b.Ctim {
			t.Errorf("%s: the mount showed %+v, a new mount shows %+v", p, a, *b)
		}
	}
}
