package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
)

func TestWriteReadThroughMount(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	if _, err := v.WriteFile(ctx, "/pre.txt", []byte("from the vault"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{})
	dir := m.Dir()

	if got := readFile(t, filepath.Join(dir, "pre.txt")); got != "from the vault" {
		t.Fatalf("read vault file through mount: got %q, want %q", got, "from the vault")
	}

	p := filepath.Join(dir, "a.txt")
	writeFile(t, p, "hello")
	if got := vaultFile(t, v, "/a.txt"); got != "hello" {
		t.Fatalf("vault after write: got %q, want %q", got, "hello")
	}

	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" world"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/a.txt"); got != "hello world" {
		t.Fatalf("vault after append: got %q, want %q", got, "hello world")
	}

	if err := os.Truncate(p, 4); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/a.txt"); got != "hell" {
		t.Fatalf("vault after truncate: got %q, want %q", got, "hell")
	}
	if got := readFile(t, p); got != "hell" {
		t.Fatalf("mount after truncate: got %q, want %q", got, "hell")
	}

	// A partial overwrite of a small file.
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("J"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/a.txt"); got != "Jell" {
		t.Fatalf("vault after overwrite: got %q, want %q", got, "Jell")
	}
	if got := readFile(t, p); got != "Jell" {
		t.Fatalf("mount after overwrite: got %q, want %q", got, "Jell")
	}

	// O_TRUNC replaces the content in one commit.
	writeFile(t, p, "new")
	if got := vaultFile(t, v, "/a.txt"); got != "new" {
		t.Fatalf("vault after O_TRUNC write: got %q, want %q", got, "new")
	}

	// A change through the vault API shows after Invalidate.
	if _, err := v.WriteFile(ctx, "/a.txt", []byte("changed by the api"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m.Invalidate()
	if got := readFile(t, p); got != "changed by the api" {
		t.Fatalf("mount after API write and Invalidate: got %q", got)
	}
}

func TestWritesAreBufferedUntilClose(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	p := filepath.Join(m.Dir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 10; i++ {
		if _, err := f.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	if got := vaultFile(t, v, "/f"); got != "" {
		t.Fatalf("vault before close: got %q, want the empty file", got)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != 100 {
		t.Fatalf("stat during writes: %v, %v; want size 100", fi, err)
	}
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/f"); len(got) != 100 {
		t.Fatalf("vault after Sync: got %d bytes, want 100", len(got))
	}
	// The kernel saw the mtime of the last write; the commit recorded its
	// own, and the kernel is told to ask again.
	e, err := v.Stat(context.Background(), "/f")
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, 2*time.Second, 10*time.Millisecond, func() error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.ModTime().Equal(e.Mtime) {
			return fmt.Errorf("mount mtime %v, vault %v", fi.ModTime(), e.Mtime)
		}
		return nil
	})
	events, err := v.Audit(context.Background(), vault.AuditFilter{Action: "file."})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[len(events)-1].Actor != "mount" {
		t.Fatalf("audit: got %+v, want file events by actor mount", events)
	}
}

func TestPartialWriteToLargeFile(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	content := pattern(3*vault.ChunkSize + 1000)
	if _, err := v.WriteFile(ctx, "/big", content, vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{})
	f, err := os.OpenFile(filepath.Join(m.Dir(), "big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte("PATCHED")
	if _, err := f.WriteAt(patch, vault.ChunkSize+5); err != nil {
		t.Fatal(err)
	}
	// Past the end: the gap reads as zeros.
	if _, err := f.WriteAt(patch, int64(len(content))+10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(content)
	copy(want[vault.ChunkSize+5:], patch)
	want = append(want, make([]byte, 10)...)
	want = append(want, patch...)
	got, _, err := v.ReadFile(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "vault content", got, want)
	mounted, err := os.ReadFile(filepath.Join(m.Dir(), "big"))
	if err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "mount content", mounted, want)
}

func TestTreeOperations(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()

	if err := os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a/b/c/file"), "x")
	if e, err := v.Stat(ctx, "/a/b/c"); err != nil || e.Kind != vault.KindDir || e.Mode != 0o750 {
		t.Fatalf("vault stat /a/b/c: %+v, %v; want a 0750 dir", e, err)
	}

	if err := os.Rename(filepath.Join(dir, "a/b"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	if got := vaultFile(t, v, "/moved/c/file"); got != "x" {
		t.Fatalf("after rename: got %q", got)
	}
	if got := readFile(t, filepath.Join(dir, "moved/c/file")); got != "x" {
		t.Fatalf("after rename through mount: got %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "a/b")); !os.IsNotExist(err) {
		t.Fatalf("old name after rename: %v, want not exist", err)
	}
	// Writes through a descriptor follow the file across a rename.
	f, err := os.OpenFile(filepath.Join(dir, "moved/c/file"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "moved"), filepath.Join(dir, "again")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("y"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/again/c/file"); got != "xy" {
		t.Fatalf("write after rename of parent: got %q, want %q", got, "xy")
	}

	// RENAME_NOREPLACE and RENAME_EXCHANGE.
	writeFile(t, filepath.Join(dir, "other"), "o")
	err = renameat2(filepath.Join(dir, "other"), filepath.Join(dir, "again/c/file"), renameNoReplace)
	wantErrno(t, "RENAME_NOREPLACE onto a file", err, syscall.EEXIST)
	if err := renameat2(filepath.Join(dir, "other"), filepath.Join(dir, "again/c/file"), renameExchange); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if a, b := readFile(t, filepath.Join(dir, "other")), readFile(t, filepath.Join(dir, "again/c/file")); a != "xy" || b != "o" {
		t.Fatalf("after RENAME_EXCHANGE: other %q, again/c/file %q", a, b)
	}
	if err := renameat2(filepath.Join(dir, "other"), filepath.Join(dir, "again/c/file"), renameExchange); err != nil {
		t.Fatalf("RENAME_EXCHANGE back: %v", err)
	}
	if err := renameat2(filepath.Join(dir, "other"), filepath.Join(dir, "fresh"), renameNoReplace); err != nil {
		t.Fatalf("RENAME_NOREPLACE to a new name: %v", err)
	}

	if err := os.Symlink("again/c/file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "link")); err != nil || got != "again/c/file" {
		t.Fatalf("Readlink: %q, %v", got, err)
	}
	if got := readFile(t, filepath.Join(dir, "link")); got != "xy" {
		t.Fatalf("read through symlink: got %q", got)
	}
	if e, err := v.Stat(ctx, "/link"); err != nil || e.Kind != vault.KindSymlink || e.Target != "again/c/file" {
		t.Fatalf("vault stat /link: %+v, %v", e, err)
	}

	if err := os.Chmod(filepath.Join(dir, "fresh"), 0o600); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "fresh"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	e, err := v.Stat(ctx, "/fresh")
	if err != nil || e.Mode != 0o600 || !e.Mtime.Equal(mtime) {
		t.Fatalf("vault stat after chmod/chtimes: %+v, %v; want mode 0600 mtime %v", e, err, mtime)
	}
	fi, err := os.Stat(filepath.Join(dir, "fresh"))
	if err != nil || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(mtime) {
		t.Fatalf("mount stat after chmod/chtimes: %v %v, %v", fi.Mode(), fi.ModTime(), err)
	}

	// cp -p style: times set before close survive the commit at close.
	f, err = os.Create(filepath.Join(dir, "copy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "copy"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err := v.Stat(ctx, "/copy"); err != nil || !e.Mtime.Equal(mtime) || e.Size != 4 {
		t.Fatalf("vault stat after write+chtimes+close: %+v, %v; want size 4 mtime %v", e, err, mtime)
	}

	if err := os.Link(filepath.Join(dir, "fresh"), filepath.Join(dir, "hard")); err != nil {
		t.Fatalf("hard link: %v", err)
	}
	if got := vaultFile(t, v, "/hard"); got != "o" {
		t.Fatalf("vault /hard: %q", got)
	}

	err = os.Remove(filepath.Join(dir, "again"))
	wantErrno(t, "rmdir of a non-empty directory", err, syscall.ENOTEMPTY, syscall.EEXIST)
	if err := os.RemoveAll(filepath.Join(dir, "again")); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	if _, err := v.Stat(ctx, "/again"); err == nil {
		t.Fatal("vault still has /again after rm -r")
	}
	list, err := v.ReadDir(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mnames []string
	for _, e := range ents {
		mnames = append(mnames, e.Name())
	}
	if !slices.Equal(names, mnames) {
		t.Fatalf("listing: mount %v, vault %v", mnames, names)
	}
	changes, err := v.Diff(ctx, "", "")
	if err != nil || !changes.Empty() {
		t.Fatalf("diff of the tree with itself: %+v, %v", changes, err)
	}
}

func TestOpenUnlinkedFileStaysReadable(t *testing.T) {
	// With the content cache the removal is queued; without, the content
	// is read in the removing transaction.
	for _, cache := range []int64{0, -1} {
		v := testVault(t, vault.Quota{})
		m := mountVault(t, v, Options{CacheBytes: cache})
		for _, how := range []string{"unlink", "rename over"} {
			p := filepath.Join(m.Dir(), "gone")
			writeFile(t, p, "still here")
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if how == "unlink" {
				err = os.Remove(p)
			} else {
				writeFile(t, p+".new", "replacement")
				err = os.Rename(p+".new", p)
			}
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			n, err := f.ReadAt(buf, 0)
			if string(buf[:n]) != "still here" {
				t.Fatalf("cache %d, %s: read after: got %q, %v", cache, how, buf[:n], err)
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
				t.Fatalf("cache %d, %s: fstat after: nlink %d, %v; want 0", cache, how, st.Nlink, err)
			}
			f.Close()
		}
		syncMount(t, m)
		if got := vaultFile(t, v, "/gone"); got != "replacement" {
			t.Fatalf("cache %d: vault /gone: got %q", cache, got)
		}
	}
}

func TestInodesStableAcrossMounts(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m, err := New(ctx, v, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"d", "d/f", "d/sub", "g"}
	if err := os.MkdirAll(filepath.Join(m.Dir(), "d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(m.Dir(), "d/f"), "1")
	writeFile(t, filepath.Join(m.Dir(), "g"), "2")
	inos := map[string]uint64{}
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(m.Dir(), p), &st); err != nil {
			t.Fatal(err)
		}
		inos[p] = st.Ino
		e, err := v.Stat(ctx, "/"+p)
		if err != nil || e.Ino != st.Ino || uint32(e.Mode) != st.Mode&0o777 || e.Mtime.UnixNano() != st.Mtim.Nano() {
			t.Fatalf("%s: mount ino %d mode %o mtime %v; vault %+v, %v", p, st.Ino, st.Mode, st.Mtim, e, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := mountVault(t, v, Options{})
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(m2.Dir(), p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != inos[p] {
			t.Fatalf("%s: ino %d after remount, was %d", p, st.Ino, inos[p])
		}
	}
}

func TestQuotaFileSize(t *testing.T) {
	one := int64(1)
	v := testVault(t, vault.Quota{MaxFileSizeMB: &one})
	m := mountVault(t, v, Options{})
	p := filepath.Join(m.Dir(), "f")
	writeFile(t, p, "old content")

	err := os.WriteFile(p, pattern(2<<20), 0o644)
	wantErrno(t, "write of 2 MiB with max_file_size_mb=1", err, syscall.EFBIG, syscall.EDQUOT)
	if got := vaultFile(t, v, "/f"); got != "old content" {
		t.Fatalf("vault after refused write: got %d bytes, want the old content", len(got))
	}
	if got := readFile(t, p); got != "old content" {
		t.Fatalf("mount after refused write: got %d bytes, want the old content", len(got))
	}

	// A limit found only at commit: tree.TestFileSizeFoundAtCommit.
}

func TestQuotaFiles(t *testing.T) {
	limit := int64(5)
	v := testVault(t, vault.Quota{MaxFiles: &limit})
	m := mountVault(t, v, Options{})
	var err error
	n := 0
	for ; n < 10; n++ {
		if err = os.WriteFile(filepath.Join(m.Dir(), "f"+string(rune('a'+n))), []byte("x"), 0o644); err != nil {
			break
		}
	}
	if n != int(limit) {
		t.Fatalf("created %d files, want %d", n, limit)
	}
	wantErrno(t, "create past max_files", err, syscall.EDQUOT)
	err = os.Mkdir(filepath.Join(m.Dir(), "dir"), 0o755)
	wantErrno(t, "mkdir past max_files", err, syscall.EDQUOT)

	var st syscall.Statfs_t
	if err := syscall.Statfs(m.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Files != uint64(limit) || st.Ffree != 0 {
		t.Fatalf("statfs: files %d free %d, want %d and 0", st.Files, st.Ffree, limit)
	}
}

func TestInvalidateAfterRestore(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	if err := os.MkdirAll(filepath.Join(dir, "src/pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "src/pkg/a.go"), "package a // v1")
	writeFile(t, filepath.Join(dir, "keep"), "keep")
	if _, err := v.SaveCheckpoint(ctx, "base", "", false, vault.Meta{}); err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(dir, "src/pkg/a.go"), "package a // v2, longer")
	writeFile(t, filepath.Join(dir, "src/pkg/new.go"), "package a")
	if err := os.Remove(filepath.Join(dir, "keep")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Warm every cache: listings, attributes, pages, negative entries.
	for _, d := range []string{".", "src", "src/pkg"} {
		if _, err := os.ReadDir(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, filepath.Join(dir, "src/pkg/a.go")); got != "package a // v2, longer" {
		t.Fatalf("before restore: got %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); !os.IsNotExist(err) {
		t.Fatalf("stat removed file: %v", err)
	}

	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.RestoreCheckpoint(ctx, "base", vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m.Invalidate()

	names := func(d string) []string {
		ents, err := os.ReadDir(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if got, want := names("."), []string{"keep", "src"}; !slices.Equal(got, want) {
		t.Fatalf("root after restore: got %v, want %v", got, want)
	}
	if got, want := names("src/pkg"), []string{"a.go"}; !slices.Equal(got, want) {
		t.Fatalf("src/pkg after restore: got %v, want %v", got, want)
	}
	if got := readFile(t, filepath.Join(dir, "src/pkg/a.go")); got != "package a // v1" {
		t.Fatalf("a.go after restore: got %q, want v1", got)
	}
	if got := readFile(t, filepath.Join(dir, "keep")); got != "keep" {
		t.Fatalf("keep after restore: got %q", got)
	}
	// The mount is writable as usual afterwards.
	writeFile(t, filepath.Join(dir, "src/pkg/a.go"), "package a // v3")
	if got := vaultFile(t, v, "/src/pkg/a.go"); got != "package a // v3" {
		t.Fatalf("write after restore: got %q", got)
	}
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	if _, err := v.WriteFile(ctx, "/f", []byte("ro"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{ReadOnly: true})
	dir := m.Dir()
	if got := readFile(t, filepath.Join(dir, "f")); got != "ro" {
		t.Fatalf("read: got %q", got)
	}
	wantErrno(t, "write", os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644), syscall.EROFS)
	wantErrno(t, "create", os.WriteFile(filepath.Join(dir, "g"), []byte("x"), 0o644), syscall.EROFS)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(dir, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "remove", os.Remove(filepath.Join(dir, "f")), syscall.EROFS)
	wantErrno(t, "rename", os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")), syscall.EROFS)
	wantErrno(t, "chmod", os.Chmod(filepath.Join(dir, "f"), 0o600), syscall.EROFS)
	wantErrno(t, "symlink", os.Symlink("f", filepath.Join(dir, "l")), syscall.EROFS)
	if got := vaultFile(t, v, "/f"); got != "ro" {
		t.Fatalf("vault after refused writes: got %q", got)
	}
}

func TestQueuedChangesReachTheVault(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{QueueCloses: true})
	dir := m.Dir()
	if err := os.MkdirAll(filepath.Join(dir, "t/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		writeFile(t, filepath.Join(dir, "t/sub", fmt.Sprint(i)), "x")
	}
	writeFile(t, filepath.Join(dir, "old"), "renamed")
	if err := os.Rename(filepath.Join(dir, "old"), filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "t")); err != nil {
		t.Fatal(err)
	}
	// Without Sync: the queue is committed within a few milliseconds.
	checkFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		list, err := v.ReadDir(ctx, "/")
		if err != nil {
			return err
		}
		if len(list) != 1 || list[0].Name != "new" {
			return fmt.Errorf("vault root lists %v, want just new", list)
		}
		return nil
	})
	events, err := v.Audit(ctx, vault.AuditFilter{Action: "remove"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 22 {
		t.Fatalf("audit has %d removals, want 22 (one per entry)", len(events))
	}

	// A change the vault refuses (made behind the mount's back, without
	// Invalidate) makes the mount drop its caches and carry on.
	writeFile(t, filepath.Join(dir, "victim"), "v")
	syncMount(t, m)
	if err := v.Remove(ctx, "/victim", vault.RemoveOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	// A rename is queued even while the kernel has not yet released the
	// file written above (an unlink of an open file would not be).
	if err := os.Rename(filepath.Join(dir, "victim"), filepath.Join(dir, "moved")); err != nil {
		t.Fatalf("rename answered from the cache: %v", err)
	}
	syncMount(t, m)
	// The resynchronisation runs in the background, and fails the files
	// open when it runs with ESTALE.
	m.t.WaitResyncs()
	m.notifies.Wait()
	writeFile(t, filepath.Join(dir, "after"), "a")
	checkFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"after", "new"}) {
			return fmt.Errorf("mount lists %v, want [after new]", names)
		}
		return nil
	})
	syncMount(t, m)
	if got := vaultFile(t, v, "/after"); got != "a" {
		t.Fatalf("vault /after: got %q", got)
	}
}

func TestCopyFileRange(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	content := pattern(300 << 10)
	if err := os.WriteFile(filepath.Join(m.Dir(), "src"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(filepath.Join(m.Dir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(m.Dir(), "dst"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for {
		n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 1<<30, 0)
		if err != nil {
			t.Fatalf("copy_file_range: %v", err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if total != len(content) {
		t.Fatalf("copied %d bytes, want %d", total, len(content))
	}
	got, _, err := v.ReadFile(context.Background(), "/dst")
	if err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "vault copy", got, content)
}

// TestConcurrentUse runs writers, renamers, readers and listers at once,
// to shake out lock-order mistakes (run it with -race).
func TestConcurrentUse(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	deadline := time.Now().Add(500 * time.Millisecond)
	errs := make(chan error, 8)
	for w := range 4 {
		go func() {
			var err error
			defer func() { errs <- err }()
			sub := filepath.Join(dir, fmt.Sprint("w", w))
			if err = os.Mkdir(sub, 0o755); err != nil {
				return
			}
			for i := 0; time.Now().Before(deadline); i++ {
				p := filepath.Join(sub, fmt.Sprint(i%5))
				if err = os.WriteFile(p, pattern(100+i), 0o644); err != nil {
					return
				}
				if _, err = os.ReadFile(p); err != nil {
					return
				}
				if err = os.Rename(p, p+".moved"); err != nil {
					return
				}
				if i%3 == 0 {
					if err = os.Remove(p + ".moved"); err != nil {
						return
					}
				}
				if i%7 == 0 {
					if err = os.Chmod(sub, 0o755); err != nil {
						return
					}
				}
			}
		}()
	}
	go func() {
		var err error
		defer func() { errs <- err }()
		for time.Now().Before(deadline) {
			if err = filepath.WalkDir(dir, func(string, os.DirEntry, error) error { return nil }); err != nil {
				return
			}
			var st syscall.Statfs_t
			if err = syscall.Statfs(dir, &st); err != nil {
				return
			}
		}
	}()
	go func() {
		defer func() { errs <- nil }()
		for time.Now().Before(deadline) {
			m.Sync(context.Background())
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for range 6 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	syncMount(t, m)
	// The mount and the vault agree on every file.
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := "/" + p[len(dir)+1:]
		got := readFile(t, p)
		if want := vaultFile(t, v, rel); got != want {
			return fmt.Errorf("%s: mount has %d bytes, vault %d", rel, len(got), len(want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCloseBusyMount(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	m, err := New(ctx, v, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(m.Dir(), "held"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("written before close"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	// Close syncs, detaches the busy mount and waits for the last user.
	checkFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got, _, err := v.ReadFile(ctx, "/held"); err != nil || string(got) != "written before close" {
			return fmt.Errorf("vault has %q, %v", got, err)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Close returned %v while a file was open", err)
	case <-time.After(500 * time.Millisecond): // past the unmount retries: detached lazily
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the last file was closed")
	}
}

// A command started while a vault is mounted must not inherit the
// /dev/fuse descriptor: it would keep a dead worker's mount hanging.
func TestChildrenDoNotInheritFuseFD(t *testing.T) {
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	out, err := osexec.Command("sh", "-c", "ls -l /proc/self/fd").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "/dev/fuse") {
		t.Fatalf("a child holds /dev/fuse while %s is mounted:\n%s", m.Dir(), out)
	}
}

// A file created through the mount reaches the vault in the transaction
// that commits its content: one commit per new file, visible once it is
// closed, with the inode number and time the kernel was shown.
func TestCreateRidesOnFirstCommit(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	// The queue's own timer would commit a create alone when the
	// machine is slow between the create and the close.
	m := mountVault(t, v, Options{flushDelay: time.Hour})
	dir := m.Dir()
	// The first create of a mount commits at once and reserves inode
	// numbers for those that follow.
	writeFile(t, filepath.Join(dir, "first"), "1")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p := filepath.Join(dir, "d", fmt.Sprint(i))
		writeFile(t, p, fmt.Sprint("content ", i))
		// Closed: in the vault without Sync, as it was shown.
		if got := vaultFile(t, v, "/d/"+fmt.Sprint(i)); got != fmt.Sprint("content ", i) {
			t.Fatalf("vault /d/%d after close: got %q", i, got)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		e, err := v.Stat(ctx, "/d/"+fmt.Sprint(i))
		if err != nil || e.Ino != st.Ino || e.Mtime.UnixNano() != st.Mtim.Nano() {
			t.Fatalf("/d/%d: mount ino %d mtime %v; vault %+v, %v", i, st.Ino, st.Mtim, e, err)
		}
		events, err := v.Audit(ctx, vault.AuditFilter{Path: "/d/" + fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			t.Fatalf("/d/%d: no audit events", i)
		}
		for _, ev := range events {
			if !ev.Time.Equal(events[0].Time) {
				t.Fatalf("/d/%d: events %s at %v and %s at %v: want one transaction", i, events[0].Action, events[0].Time, ev.Action, ev.Time)
			}
		}
	}
	if e, err := v.Stat(ctx, "/d"); err != nil || e.Mode.Perm() != 0o750 {
		t.Fatalf("vault /d: %+v, %v; want a directory of mode 750", e, err)
	}

	// Created and closed with nothing written: in the vault at close.
	f, err := os.OpenFile(filepath.Join(dir, "d/empty"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err := v.Stat(ctx, "/d/empty"); err != nil || e.Size != 0 || e.Mode.Perm() != 0o600 {
		t.Fatalf("vault /d/empty after close: %+v, %v", e, err)
	}

	// Renamed and removed while open, before any commit: the vault
	// ends with the rename only.
	f, err = os.Create(filepath.Join(dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "d/moved")); err != nil {
		t.Fatal(err)
	}
	g, err := os.Create(filepath.Join(dir, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vaultFile(t, v, "/d/moved"); got != "moved" {
		t.Fatalf("vault /d/moved: got %q", got)
	}
	syncMount(t, m)
	for _, p := range []string{"/tmp", "/gone"} {
		if _, err := v.Stat(ctx, p); !errors.Is(err, vault.ErrNotFound) {
			t.Fatalf("vault %s: got %v, want not found", p, err)
		}
	}
}

// A new file whose content breaks a quota: close reports it, and the
// file stays, empty, as when the create was committed on its own.
func TestCreateThenQuotaAtClose(t *testing.T) {
	ctx := context.Background()
	one := int64(1)
	v := testVault(t, vault.Quota{MaxSizeMB: &one})
	m := mountVault(t, v, Options{})
	writeFile(t, filepath.Join(m.Dir(), "first"), "1")
	p := filepath.Join(m.Dir(), "big")
	err := os.WriteFile(p, pattern(2<<20), 0o644)
	wantErrno(t, "close of a new 2 MiB file with max_size_mb=1", err, syscall.EDQUOT, syscall.ENOSPC)
	syncMount(t, m)
	if e, err := v.Stat(ctx, "/big"); err != nil || e.Size != 0 {
		t.Fatalf("vault /big after refused content: %+v, %v; want an empty file", e, err)
	}
	if got := readFile(t, p); got != "" {
		t.Fatalf("mount /big after refused content: got %d bytes, want none", len(got))
	}
}

// Directories are read without OPENDIR: a listing too long for one
// READDIRPLUS reply is read in parts, each through a handle of its own
// that starts at the kernel's offset, and changes still show.
func TestLongListingWithoutOpendir(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := filepath.Join(m.Dir(), "long")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 600 {
		name := fmt.Sprintf("entry-with-a-rather-long-name-to-fill-the-buffer-%04d", i)
		writeFile(t, filepath.Join(dir, name), "x")
		want[name] = true
	}
	list := func() map[string]bool {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, e := range ents {
			if got[e.Name()] {
				t.Fatalf("listing has %s twice", e.Name())
			}
			got[e.Name()] = true
		}
		return got
	}
	for round := range 2 {
		got := list()
		if len(got) != len(want) {
			t.Fatalf("round %d: listing has %d entries, want %d", round, len(got), len(want))
		}
		for name := range want {
			if !got[name] {
				t.Fatalf("round %d: listing lacks %s", round, name)
			}
		}
		for i := round; i < 600; i += 3 {
			name := fmt.Sprintf("entry-with-a-rather-long-name-to-fill-the-buffer-%04d", i)
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
		}
	}
}

// With QueueCloses, a close queues the file's content in a vault without
// quotas, and a hard link is queued too: a burst of small files, linked
// or renamed into place as git does, reaches
// the vault in one transaction at Sync, with the inode numbers, modes and
// times the kernel was shown, and reads back through the mount at once.
// fsync commits at once, and a vault with a quota still reports a refused
// commit at close.
func TestQueueCloses(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	// The queue's own timer would commit a burst in parts on a slow
	// machine; at Sync it must be whole.
	m := mountVault(t, v, Options{QueueCloses: true, flushDelay: time.Hour})
	dir := m.Dir()
	// The first create of a mount commits at once and reserves inode
	// numbers for those that follow.
	writeFile(t, filepath.Join(dir, "first"), "1")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	before, err := v.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		tmp := filepath.Join(dir, "d", fmt.Sprint("tmp", i))
		writeFile(t, tmp, fmt.Sprint("content ", i))
		// Into place as git does: a hard link and an unlink for even
		// files, a rename for odd ones.
		final := filepath.Join(dir, "d", fmt.Sprint(i))
		if i%2 == 0 {
			if err := os.Link(tmp, final); err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(tmp, &st); err != nil || st.Nlink != 2 {
				t.Fatalf("d/tmp%d after link: nlink %d, %v; want 2", i, st.Nlink, err)
			}
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Rename(tmp, final); err != nil {
			t.Fatal(err)
		}
	}
	// A name kept next to the first: two names of one inode in the vault.
	if err := os.Link(filepath.Join(dir, "d", "1"), filepath.Join(dir, "d", "1b")); err != nil {
		t.Fatal(err)
	}
	// Rewrite an existing file's middle: a content change, not a create.
	f, err := os.OpenFile(filepath.Join(dir, "d", "0"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("CONT"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		want := fmt.Sprint("content ", i)
		if i == 0 {
			want = "CONTent 0"
		}
		if got := readFile(t, filepath.Join(dir, "d", fmt.Sprint(i))); got != want {
			t.Fatalf("mount /d/%d before Sync: got %q, want %q", i, got, want)
		}
	}
	syncMount(t, m)
	after, err := v.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq != before.Seq+1 {
		t.Fatalf("%d files written, renamed and closed took %d transactions, want 1", n, after.Seq-before.Seq)
	}
	for i := range n {
		want := fmt.Sprint("content ", i)
		if i == 0 {
			want = "CONTent 0"
		}
		p := filepath.Join(dir, "d", fmt.Sprint(i))
		if got := vaultFile(t, v, "/d/"+fmt.Sprint(i)); got != want {
			t.Fatalf("vault /d/%d: got %q, want %q", i, got, want)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		e, err := v.Stat(ctx, "/d/"+fmt.Sprint(i))
		if err != nil || e.Ino != st.Ino || uint32(e.Mode) != st.Mode&0o777 || e.Mtime.UnixNano() != st.Mtim.Nano() {
			t.Fatalf("/d/%d: mount ino %d mode %o mtime %v; vault %+v, %v", i, st.Ino, st.Mode, st.Mtim, e, err)
		}
		if _, err := v.Stat(ctx, "/d/tmp"+fmt.Sprint(i)); !errors.Is(err, vault.ErrNotFound) {
			t.Fatalf("vault /d/tmp%d: got %v, want not found", i, err)
		}
	}
	a, errA := v.Stat(ctx, "/d/1")
	b, errB := v.Stat(ctx, "/d/1b")
	if errA != nil || errB != nil || a.Ino != b.Ino || a.Nlink != 2 || vaultFile(t, v, "/d/1b") != "content 1" {
		t.Fatalf("vault /d/1 and /d/1b: %+v, %v; %+v, %v; want one inode with 2 links", a, errA, b, errB)
	}

	// fsync commits what an earlier close queued, without Sync.
	writeFile(t, filepath.Join(dir, "synced"), "durable")
	f, err = os.Open(filepath.Join(dir, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := vaultFile(t, v, "/synced"); got != "durable" {
		t.Fatalf("vault /synced after fsync: got %q", got)
	}

	// A quota can refuse a commit: close reports it, queue or not.
	one := int64(1)
	qv := testVault(t, vault.Quota{MaxSizeMB: &one})
	qm := mountVault(t, qv, Options{QueueCloses: true, flushDelay: time.Hour})
	err = os.WriteFile(filepath.Join(qm.Dir(), "big"), pattern(2<<20), 0o644)
	wantErrno(t, "close of a new 2 MiB file with max_size_mb=1 and QueueCloses", err, syscall.EDQUOT, syscall.ENOSPC)
}

// TestQueuedCloseReachesVault: where closes are queued the kernel sends
// no FLUSH for a written file (its RELEASE queues the content), yet what
// a close leaves still reaches the vault, and other readers of it, as it
// did: within the queue's delay, also when another descriptor of the
// file stays open, and at once with Sync after the writer exited.
func TestQueuedCloseReachesVault(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{QueueCloses: true})
	p := filepath.Join(m.Dir(), "log")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(p) // held open across the writer's close
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString("first line\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the vault's /log after the writer's close, its reader still open", func() (bool, error) {
		data, _, err := v.ReadFile(context.Background(), "/log")
		return err == nil && string(data) == "first line\n", nil
	})
	// A process that writes, closes and exits, then Sync: as exec's
	// runner does before it reads the vault's changes.
	cmd := commandIn(m.Dir(), "sh", "-c", `for i in 1 2 3 4 5 6 7 8; do printf 'file %s\n' $i > f$i; done`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	syncMount(t, m)
	for i := 1; i <= 8; i++ {
		if got, want := vaultFile(t, v, fmt.Sprintf("/f%d", i)), fmt.Sprintf("file %d\n", i); got != want {
			t.Fatalf("vault /f%d after Sync: %q, want %q", i, got, want)
		}
	}
}
