package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/vault"
)

// The tests below change a mounted vault from another process, as `avfs
// write` or a worker's exec does, and wait (at most the 1 s the design
// allows) for the mount to show it.

const seenWithin = time.Second

// TestHelperProcess is the other process: run by otherProcess, it opens
// the store itself and changes the vault.
func TestHelperProcess(t *testing.T) {
	store := os.Getenv("AVFS_TEST_STORE")
	if store == "" {
		return
	}
	err := helper(store, os.Args[len(os.Args)-3:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(store string, args []string) error {
	ctx := context.Background()
	s, err := vault.Open(ctx, store, vault.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	v := s.Vault("default", "v")
	switch op, a, b := args[0], args[1], args[2]; op {
	case "write":
		_, err = v.WriteFile(ctx, a, []byte(b), vault.WriteOptions{Parents: true}, vault.Meta{Actor: "other"})
	case "append":
		_, err = v.WriteFile(ctx, a, []byte(b), vault.WriteOptions{Append: true}, vault.Meta{Actor: "other"})
	case "rm":
		err = v.Remove(ctx, a, vault.RemoveOptions{Recursive: true}, vault.Meta{Actor: "other"})
	case "mv":
		err = v.Rename(ctx, a, b, vault.RenameOptions{}, vault.Meta{Actor: "other"})
	case "chmod":
		mode := fs.FileMode(0o600)
		_, err = v.SetAttr(ctx, a, &mode, nil, vault.Meta{Actor: "other"})
	case "restore":
		_, err = v.RestoreCheckpoint(ctx, a, vault.Meta{Actor: "other"})
	case "read":
		var data []byte
		if data, _, err = v.ReadFile(ctx, a); err == nil {
			_, err = os.Stdout.Write(data)
		}
	default:
		err = fmt.Errorf("unknown op %q", op)
	}
	return err
}

// otherProcess changes the vault behind m from a separate process.
func otherProcess(t testing.TB, store string, op, a, b string) {
	t.Helper()
	if _, err := otherProcessOut(store, op, a, b); err != nil {
		t.Fatalf("other process %s %s %s: %v", op, a, b, err)
	}
}

// otherProcessOut runs op in a separate process and returns what it
// printed (the content, for read).
func otherProcessOut(store string, op, a, b string) (string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--", op, a, b)
	cmd.Env = append(os.Environ(), "AVFS_TEST_STORE="+store)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// followVault is a fresh vault and its store file, mounted.
func followVault(t *testing.T) (*vault.Vault, string, *Mount) {
	t.Helper()
	v, store := storeVault(t, vault.Quota{}, vault.Options{})
	return v, store, mountVault(t, v, Options{})
}

func names(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

// eventually waits for fn to hold, at most seenWithin.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	checkFor(t, seenWithin, 10*time.Millisecond, func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

func fileIs(p, want string) func() error {
	return func() error {
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if string(got) != want {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	}
}

func absent(p string) func() error {
	return func() error {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stat %s: %v, want ENOENT", p, err)
		}
		return nil
	}
}

func listIs(dir string, want ...string) func() error {
	return func() error {
		got, err := names(dir)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("ls %s: got %d names, want %d: missing %q, extra %q", dir, len(got), len(want), without(want, got), without(got, want))
		}
		return nil
	}
}

// without lists the names of a that b lacks.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestSeesOtherProcessWrites is the first case: another process
// writes b.txt and changes a.txt while the mount runs, after the kernel
// cached the listing, a.txt's content and the miss on b.txt.
func TestSeesOtherProcessWrites(t *testing.T) {
	_, store, m := followVault(t)
	dir := m.Dir()
	writeFile(t, filepath.Join(dir, "a.txt"), "one")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	if got := readFile(t, filepath.Join(dir, "a.txt")); got != "one" {
		t.Fatalf("a.txt: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b.txt before: %v", err)
	}
	if _, err := names(dir); err != nil {
		t.Fatal(err)
	}
	// An open descriptor must keep working, and read the new content.
	fd, err := os.Open(filepath.Join(dir, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()

	otherProcess(t, store, "write", "/b.txt", "two")
	otherProcess(t, store, "write", "/a.txt", "changed")
	otherProcess(t, store, "write", "/sub/deep/c.txt", "three")
	eventually(t, "b.txt", fileIs(filepath.Join(dir, "b.txt"), "two"))
	eventually(t, "a.txt", fileIs(filepath.Join(dir, "a.txt"), "changed"))
	eventually(t, "ls", listIs(dir, "a.txt", "b.txt", "sub"))
	eventually(t, "sub/deep/c.txt", fileIs(filepath.Join(dir, "sub", "deep", "c.txt"), "three"))
	buf := make([]byte, 16)
	n, err := fd.ReadAt(buf, 0)
	if string(buf[:n]) != "changed" {
		t.Fatalf("read through a descriptor opened before the change: %q, %v", buf[:n], err)
	}

	otherProcess(t, store, "append", "/a.txt", "+more")
	eventually(t, "append", fileIs(filepath.Join(dir, "a.txt"), "changed+more"))
	otherProcess(t, store, "mv", "/b.txt", "/sub/b2.txt")
	eventually(t, "renamed away", absent(filepath.Join(dir, "b.txt")))
	eventually(t, "renamed in", fileIs(filepath.Join(dir, "sub", "b2.txt"), "two"))
	otherProcess(t, store, "chmod", "/a.txt", "")
	eventually(t, "chmod", func() error {
		st, err := os.Stat(filepath.Join(dir, "a.txt"))
		if err != nil || st.Mode().Perm() != 0o600 {
			return fmt.Errorf("mode %v, %v; want 0600", st.Mode(), err)
		}
		return nil
	})
	otherProcess(t, store, "rm", "/sub", "")
	eventually(t, "rm -r sub", absent(filepath.Join(dir, "sub")))
	eventually(t, "ls after", listIs(dir, "a.txt"))
}

// TestSeesRestore: a checkpoint restore by another process takes the
// mount back: files the restore removed are gone, changed ones read as
// they were.
func TestSeesRestore(t *testing.T) {
	v, store, m := followVault(t)
	dir := m.Dir()
	writeFile(t, filepath.Join(dir, "keep.txt"), "v1")
	syncMount(t, m)
	if _, err := v.SaveCheckpoint(context.Background(), "cp", "", false, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "keep.txt"), "v2")
	writeFile(t, filepath.Join(dir, "later.txt"), "new")
	if err := os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m)
	if got := readFile(t, filepath.Join(dir, "later.txt")); got != "new" {
		t.Fatal(got)
	}
	otherProcess(t, store, "restore", "cp", "")
	eventually(t, "later.txt removed by the restore", absent(filepath.Join(dir, "later.txt")))
	eventually(t, "keep.txt as saved", fileIs(filepath.Join(dir, "keep.txt"), "v1"))
	eventually(t, "ls", listIs(dir, "keep.txt"))
	// The mount still works as before.
	writeFile(t, filepath.Join(dir, "after.txt"), "x")
	syncMount(t, m)
	if got := vaultFile(t, v, "/after.txt"); got != "x" {
		t.Fatal(got)
	}
}

// TestOwnChangesSurviveForeignOnes: while another process writes, the
// mount keeps creating, renaming and removing files; none of its
// changes is lost or undone, and it sees the other's.
func TestOwnChangesSurviveForeignOnes(t *testing.T) {
	v, store, m := followVault(t)
	dir := m.Dir()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 5 {
			otherProcess(t, store, "write", fmt.Sprintf("/other-%d", i), "o")
		}
	}()
	for i := range 200 {
		p := filepath.Join(dir, fmt.Sprintf("own-%d", i))
		writeFile(t, p, "m")
		if i%3 == 0 {
			if err := os.Rename(p, p+".moved"); err != nil {
				t.Fatal(err)
			}
		}
		if i%5 == 0 {
			os.Remove(p)
			os.Remove(p + ".moved")
		}
	}
	wg.Wait()
	var want []string
	for i := range 200 {
		switch {
		case i%5 == 0:
		case i%3 == 0:
			want = append(want, fmt.Sprintf("own-%d.moved", i))
		default:
			want = append(want, fmt.Sprintf("own-%d", i))
		}
	}
	for i := range 5 {
		want = append(want, fmt.Sprintf("other-%d", i))
	}
	slices.Sort(want)
	eventually(t, "ls", listIs(dir, want...))
	syncMount(t, m)
	es, err := v.ReadDir(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("vault: got %d entries, want %d:\n%s", len(got), len(want), strings.Join(got, " "))
	}
}

// TestRefreshIsImmediate: Refresh shows a change at once, without
// waiting for the poll.
func TestRefreshIsImmediate(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{Poll: -1})
	if _, err := names(m.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(context.Background(), "/x", []byte("api"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(m.Dir(), "x"))
	if err != nil || !bytes.Equal(got, []byte("api")) {
		t.Fatalf("after Refresh: %q, %v", got, err)
	}
	wantErrno(t, "stat missing", func() error { _, err := os.Stat(filepath.Join(m.Dir(), "y")); return err }(), syscall.ENOENT)
}

// An audit clear removes events a following mount has not read yet: the
// mount must still see the change they stood for.
func TestAuditClearKeepsFollowersRight(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	v, _ := storeVault(t, vault.Quota{}, vault.Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if _, err := v.WriteFile(ctx, "/x/a", []byte("one"), vault.WriteOptions{Parents: true}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{Poll: -1})
	dir := filepath.Join(m.Dir(), "x")
	if got, err := names(dir); err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ls x: %q %v", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "one" {
		t.Fatalf("read: %q %v", b, err)
	}
	// Another writer changes the tree; the events of all but its last
	// change are cleared before the mount reads the log.
	for _, p := range []string{"/x/c", "/y"} {
		if _, err := v.WriteFile(ctx, p, []byte("new"), vault.WriteOptions{}, vault.Meta{Actor: "other"}); err != nil {
			t.Fatal(err)
		}
	}
	now.Add(int64(2 * time.Minute))
	n, err := v.AuditClear(ctx, time.Unix(0, now.Load()), false, vault.Meta{})
	if err != nil || n == 0 {
		t.Fatalf("audit clear: %d, %v", n, err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := names(dir); err != nil || !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("ls x through the mount after a foreign write and an audit clear: %q %v, want [a c]", got, err)
	}
}
