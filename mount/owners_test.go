package mount

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/vault"
)

// asUser runs sh -c script as uid:gid (no supplementary groups) in dir,
// and returns its combined output and error.
func asUser(t *testing.T, uid, gid int, dir, script string) (string, error) {
	t.Helper()
	cmd := commandIn(dir, "setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid), "--clear-groups", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// otherMount mounts a fresh vault with AllowOther where other users can
// reach it (t.TempDir is private to root).
func otherMount(t *testing.T) *Mount {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatalf("owner tests switch users: they need root")
	}
	if _, err := osexec.LookPath("setpriv"); err != nil {
		t.Fatalf("owner tests need setpriv (util-linux): %v", err)
	}
	m := mountVault(t, testVault(t, vault.Quota{}), Options{AllowOther: true})
	for d := filepath.Dir(m.Dir()); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

// TestOwnersAndPermissions: another user reaches the mount, creates
// entries owned by itself, and is refused what its permissions deny;
// only root changes owners, and chown clears setuid.
func TestOwnersAndPermissions(t *testing.T) {
	m := otherMount(t)
	dir := m.Dir()
	if err := os.Mkdir(filepath.Join(dir, "pub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(filepath.Join(dir, "pub"), 0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "root-only"), "secret")
	if err := os.Chmod(filepath.Join(dir, "root-only"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := asUser(t, 65534, 65534, dir, "echo hi > pub/mine && cat root-only")
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("nobody reading a 0600 root file: got %v %q, want permission denied", err, out)
	}
	st := statT(t, filepath.Join(dir, "pub/mine"))
	if st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("file created by nobody: owner %d:%d, want 65534:65534", st.Uid, st.Gid)
	}
	if out, err := asUser(t, 65534, 65534, dir, "chown 0 pub/mine"); err == nil {
		t.Fatalf("chown by nobody: got success (%q), want EPERM", out)
	}
	if out, err := asUser(t, 65534, 65534, dir, "echo x > root-new"); err == nil {
		t.Fatalf("nobody creating in a 0755 root directory: got success (%q), want EACCES", out)
	}

	// Root gives a setuid file away: the bit goes.
	f := filepath.Join(dir, "pub/tool")
	writeFile(t, f, "#!/bin/sh\n")
	if err := syscall.Chmod(f, 0o4755); err != nil {
		t.Fatal(err)
	}
	if st := statT(t, f); st.Mode&0o7777 != 0o4755 {
		t.Fatalf("chmod 4755: mode %o", st.Mode&0o7777)
	}
	if err := os.Chown(f, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if st := statT(t, f); st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o7777 != 0o755 {
		t.Fatalf("after chown 1000:1000: %d:%d mode %o, want 1000:1000 mode 755", st.Uid, st.Gid, st.Mode&0o7777)
	}

	// The vault holds what the kernel was shown, and a new mount shows it.
	syncMount(t, m)
	e, err := m.v.Stat(m.ctx, "/pub/mine")
	if err != nil || e.Uid != 65534 || e.Gid != 65534 {
		t.Fatalf("vault's /pub/mine: %+v %v, want owner 65534:65534", e, err)
	}
	e, err = m.v.Stat(m.ctx, "/pub/tool")
	if err != nil || e.Uid != 1000 || vault.ModeBits(e.Mode) != 0o755 {
		t.Fatalf("vault's /pub/tool: %+v %v, want uid 1000, mode 0755", e, err)
	}
}

// TestStickyAndSetgid: in a sticky directory only an entry's owner (or
// root) removes it; in a setgid directory new entries take its group,
// and new directories are setgid too.
func TestStickyAndSetgid(t *testing.T) {
	m := otherMount(t)
	dir := m.Dir()
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	if out, err := asUser(t, 1000, 1000, tmp, "echo a > a"); err != nil {
		t.Fatalf("user 1000 creating in /tmp: %v %q", err, out)
	}
	if out, err := asUser(t, 65534, 65534, tmp, "rm -f a"); err == nil {
		t.Fatalf("nobody removing user 1000's file in a sticky directory: got success (%q), want EPERM", out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "a")); err != nil {
		t.Fatalf("the file must stay: %v", err)
	}
	if out, err := asUser(t, 1000, 1000, tmp, "rm a"); err != nil {
		t.Fatalf("owner removing its file: %v %q", err, out)
	}

	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(shared, 0o2777); err != nil {
		t.Fatal(err)
	}
	if out, err := asUser(t, 1000, 1000, shared, "echo x > f && mkdir d"); err != nil {
		t.Fatalf("user 1000 creating in the setgid directory: %v %q", err, out)
	}
	if st := statT(t, filepath.Join(shared, "f")); st.Uid != 1000 || st.Gid != 50 {
		t.Fatalf("file in setgid directory: owner %d:%d, want 1000:50", st.Uid, st.Gid)
	}
	if st := statT(t, filepath.Join(shared, "d")); st.Gid != 50 || st.Mode&syscall.S_ISGID == 0 {
		t.Fatalf("directory in setgid directory: gid %d mode %o, want gid 50 and setgid", st.Gid, st.Mode&0o7777)
	}
}

// TestSpecialNodes: fifos, sockets and device nodes are made, listed,
// kept in the vault and usable (a fifo passes data between processes).
func TestSpecialNodes(t *testing.T) {
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	dir := m.Dir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, int(mkdev(1, 3))); err != nil {
		t.Fatalf("mknod char: %v", err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "blk"), syscall.S_IFBLK|0o600, int(mkdev(8, 1))); err != nil {
		t.Fatalf("mknod block: %v", err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "sock"), syscall.S_IFSOCK|0o755, 0); err != nil {
		t.Fatalf("mknod socket: %v", err)
	}
	for name, want := range map[string]uint32{"fifo": syscall.S_IFIFO, "null": syscall.S_IFCHR, "blk": syscall.S_IFBLK, "sock": syscall.S_IFSOCK} {
		if st := statT(t, filepath.Join(dir, name)); st.Mode&syscall.S_IFMT != want {
			t.Errorf("%s: type %o, want %o", name, st.Mode&syscall.S_IFMT, want)
		}
	}
	if st := statT(t, filepath.Join(dir, "null")); st.Rdev != mkdev(1, 3) {
		t.Errorf("null: rdev %#x, want %#x", st.Rdev, mkdev(1, 3))
	}
	// The mount is nodev (as FUSE mounts are by default): a device
	// node is kept, but opening it is refused.
	_, err := os.OpenFile(filepath.Join(dir, "null"), os.O_WRONLY, 0)
	wantErrno(t, "open of a device node on a nodev mount", err, syscall.EACCES)
	// A fifo carries data from one process to another.
	out, err := osexec.Command("sh", "-c", "echo through > "+fifo+" & cat "+fifo).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "through" {
		t.Fatalf("fifo: %v %q", err, out)
	}
	syncMount(t, m)
	list, err := m.v.ReadDir(m.ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]vault.Kind{}
	for _, e := range list {
		kinds[e.Name] = e.Kind
	}
	if kinds["fifo"] != vault.KindFifo || kinds["null"] != vault.KindCharDev || kinds["blk"] != vault.KindBlkDev || kinds["sock"] != vault.KindSocket {
		t.Fatalf("vault kinds: %v", kinds)
	}
}

func mkdev(major, minor uint64) uint64 {
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32
}

// TestDirLinksAndNames: a directory counts 2 links plus its
// subdirectories; a name over 255 bytes is ENAMETOOLONG for every call,
// a lookup included; a tree may be deeper than 4,096 bytes of path.
func TestDirLinksAndNames(t *testing.T) {
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	dir := m.Dir()
	for _, d := range []string{"a", "a/b", "a/c"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "a/f"), "x")
	if n := statT(t, filepath.Join(dir, "a")).Nlink; n != 4 {
		t.Fatalf("links of a directory with 2 subdirectories: %d, want 4", n)
	}
	if err := os.Rename(filepath.Join(dir, "a/c"), filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a/b")); err != nil {
		t.Fatal(err)
	}
	if n := statT(t, filepath.Join(dir, "a")).Nlink; n != 2 {
		t.Fatalf("links after moving one subdirectory out and removing the other: %d, want 2", n)
	}
	syncMount(t, m)
	if e, err := m.v.Stat(m.ctx, "/"); err != nil || e.Nlink != 4 {
		t.Fatalf("vault's root: %+v %v, want 4 links", e, err)
	}

	long := strings.Repeat("n", 256)
	_, err := os.Lstat(filepath.Join(dir, long))
	wantErrno(t, "lstat of a 256-byte name", err, syscall.ENAMETOOLONG)
	err = os.WriteFile(filepath.Join(dir, long), nil, 0o644)
	wantErrno(t, "create of a 256-byte name", err, syscall.ENAMETOOLONG)

	// 20 levels of 250 bytes: 5,000 bytes of path from the vault root,
	// each call relative to the directory above.
	name := strings.Repeat("d", 250)
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := syscall.Mkdirat(fd, name, 0o755); err != nil {
			syscall.Close(fd)
			t.Fatalf("mkdir at depth %d: %v", i, err)
		}
		nfd, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		syscall.Close(fd)
		if err != nil {
			t.Fatalf("open at depth %d: %v", i, err)
		}
		fd = nfd
	}
	ffd, err := syscall.Openat(fd, "leaf", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	syscall.Close(fd)
	if err != nil {
		t.Fatalf("create at 5,000 bytes of path: %v", err)
	}
	syscall.Close(ffd)
	syncMount(t, m)
	deep := strings.Repeat("/"+name, 20) + "/leaf"
	if _, err := m.v.Stat(m.ctx, deep); err != nil {
		t.Fatalf("the vault has the deep file: %v", err)
	}
}

// TestRelatime: a read moves the access time when it is not later than
// the modification time (relatime), and leaves the change time alone;
// utimensat sets both times.
func TestRelatime(t *testing.T) {
	v := testVault(t, vault.Quota{})
	if _, err := v.WriteFile(context.Background(), "/f", []byte("data"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{})
	f := filepath.Join(m.Dir(), "f")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(f, old.Add(-time.Minute), old); err != nil {
		t.Fatal(err)
	}
	st := statT(t, f)
	if st.Atim.Sec != old.Unix()-60 || st.Mtim.Sec != old.Unix() {
		t.Fatalf("after utimes: atime %d mtime %d, want %d and %d", st.Atim.Sec, st.Mtim.Sec, old.Unix()-60, old.Unix())
	}
	ctime := st.Ctim
	readFile(t, f)
	st = statT(t, f)
	if time.Since(time.Unix(st.Atim.Unix())) > time.Minute {
		t.Fatalf("read of a file whose atime is before its mtime: atime %v, want now", time.Unix(st.Atim.Unix()))
	}
	if st.Ctim != ctime {
		t.Fatalf("a read changed the change time: %v, was %v", st.Ctim, ctime)
	}
	syncMount(t, m)
	e, err := v.Stat(context.Background(), "/f")
	if err != nil || time.Since(e.Atime) > time.Minute {
		t.Fatalf("vault's atime after the read: %v %v, want now", e.Atime, err)
	}
}

// Reading many files commits their access times in one burst, not one
// transaction per file: a queued atime does not hold up the next read.
func TestReadsQueueAccessTimes(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	const n = 20
	for i := range n {
		if _, err := v.WriteFile(ctx, fmt.Sprint("/f", i), []byte(fmt.Sprint("content ", i)), vault.WriteOptions{}, vault.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	m := mountVault(t, v, Options{flushDelay: time.Hour})
	before, err := v.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		if got := readFile(t, filepath.Join(m.Dir(), fmt.Sprint("f", i))); got != fmt.Sprint("content ", i) {
			t.Fatalf("f%d: got %q", i, got)
		}
	}
	syncMount(t, m)
	after, err := v.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq != before.Seq+1 {
		t.Fatalf("reading %d files took %d transactions, want 1 (their access times)", n, after.Seq-before.Seq)
	}
	for i := range n {
		e, err := v.Stat(ctx, fmt.Sprint("/f", i))
		if err != nil || e.Atime.Before(start.Add(-time.Second)) {
			t.Fatalf("vault f%d after reads: atime %v, %v; want about %v", i, e.Atime, err, start)
		}
	}
}
