package mount

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/vault"
)

// bigDir mounts a new vault and makes a directory of 300 files in it,
// old-0000 to old-0299, more than one READDIR returns.
func bigDir(t *testing.T) string {
	t.Helper()
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	dir := filepath.Join(m.Dir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("old-%04d", i)), "x")
	}
	return dir
}

// The git clean / remove_dir_all pattern: reading a large directory and
// removing its entries in one open of it.
func TestReadDirWhileUnlinking(t *testing.T) {
	dir := bigDir(t)
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for {
		names, err := f.Readdirnames(1)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("readdir after %d removals: %v", removed, err)
		}
		for _, n := range names {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				t.Fatalf("remove %s: %v", n, err)
			}
			removed++
		}
	}
	f.Close()
	left, _ := os.ReadDir(dir)
	if removed != 300 || len(left) != 0 {
		t.Fatalf("removed %d of 300 in one pass; %d left", removed, len(left))
	}
}

// A file created read-only (a lock file) is in the vault once closed.

// utimens on a new file before its first write: the vault ends with the
// write's mtime, as the mount shows.
func TestTimesSetBeforeTheFirstWriteKeepTheWrite(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	writeFile(t, filepath.Join(m.Dir(), "first"), "1")
	for i := 0; i < 20; i++ {
		p := filepath.Join(m.Dir(), "f"+string(rune('a'+i)))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		old := time.Unix(1e9, 0)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		f.WriteString("data")
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		syscall.Stat(p, &st)
		e, err := v.Stat(context.Background(), "/f"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		if e.Mtime.UnixNano() != st.Mtim.Nano() {
			t.Errorf("%s: mount mtime %v, vault mtime %v", p, time.Unix(0, st.Mtim.Nano()), e.Mtime)
		}
	}
}

// Creating entries while reading a large directory: every name is listed
// at most once, and every entry that was there before is listed.
func TestReadDirWhileCreating(t *testing.T) {
	dir := bigDir(t)
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatalf("still reading after 1000 rounds: %d names seen, %d of them more than once", len(seen), dups(seen))
		}
		names, err := f.Readdirnames(7)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("readdir: %v", err)
		}
		for _, n := range names {
			seen[n]++
		}
		if i < 40 { // (a reader at the end would meet each new one, forever)
			writeFile(t, filepath.Join(dir, fmt.Sprintf("new-%04d", i)), "y")
		}
	}
	for n, c := range seen {
		if c > 1 {
			t.Errorf("%s listed %d times", n, c)
		}
	}
	for i := range 300 {
		if n := fmt.Sprintf("old-%04d", i); seen[n] != 1 {
			t.Errorf("%s listed %d times, want once", n, seen[n])
		}
	}
}

func dups(seen map[string]int) int {
	n := 0
	for _, c := range seen {
		if c > 1 {
			n++
		}
	}
	return n
}
