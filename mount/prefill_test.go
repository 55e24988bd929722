package mount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/vault"
)

// TestPrefilledReads: files whose content the mount holds in memory (read
// ahead with their directory) are handed to the kernel with their open
// (Mount.prefill): they read right, a read moves the access time as a
// READ would, and a change through the API, through the mount or through
// another descriptor shows at the next read.
func TestPrefilledReads(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	const n = 10
	content := func(i int) string { return fmt.Sprintf("content of f%02d\n", i) }
	err := v.Update(ctx, vault.Meta{}, func(tx *vault.Tx) error {
		for i := range n {
			if _, err := tx.WriteFile(fmt.Sprintf("/d/f%02d", i), []byte(content(i)), vault.WriteOptions{Parents: true}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{Poll: -1})
	path := func(i int) string { return filepath.Join(m.Dir(), "d", fmt.Sprintf("f%02d", i)) }

	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path(2), old.Add(-time.Minute), old); err != nil {
		t.Fatal(err)
	}
	// f00 is read alone, f01 reads the rest of the directory ahead: from
	// f02 on, the opens hand over the content.
	for i := range n {
		if got := readFile(t, path(i)); got != content(i) {
			t.Fatalf("f%02d: %q, want %q", i, got, content(i))
		}
	}

	// The access time of f02 was before its mtime: the read moved it, in
	// the vault and, once the reader's descriptor is released, in stat.
	syncMount(t, m)
	if e, err := v.Stat(ctx, "/d/f02"); err != nil || time.Since(e.Atime) > time.Minute {
		t.Fatalf("vault's atime of f02 after a read: %v, %v; want now", e.Atime, err)
	}
	poll.Until(t, 10*time.Second, "stat of f02 showing the read's access time", func() (bool, error) {
		st := statT(t, path(2))
		return time.Since(time.Unix(st.Atim.Unix())) < time.Minute, nil
	})
	if st := statT(t, path(2)); st.Mtim.Sec != old.Unix() {
		t.Fatalf("a read changed the mtime of f02: %d, want %d", st.Mtim.Sec, old.Unix())
	}

	// A change through the API, before and after the kernel holds the
	// content.
	if _, err := v.WriteFile(ctx, "/d/f05", []byte("changed through the API\n"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path(5)); got != "changed through the API\n" {
		t.Fatalf("f05 after an API write: %q", got)
	}
	if got := readFile(t, path(5)); got != "changed through the API\n" {
		t.Fatalf("f05 read again: %q", got)
	}

	// A write through the mount; then a descriptor held across a write
	// made through another one reads the new bytes.
	writeFile(t, path(6), "written through the mount\n")
	if got := readFile(t, path(6)); got != "written through the mount\n" {
		t.Fatalf("f06 after a write: %q", got)
	}
	r, err := os.Open(path(7))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(path(7), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("CONTENT"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	k, err := r.ReadAt(buf, 0)
	if want := "CONTENT" + content(7)[7:]; string(buf[:k]) != want {
		t.Fatalf("f07 through a descriptor held across a write: %q, %v; want %q", buf[:k], err, want)
	}
	syncMount(t, m)
	if got := vaultFile(t, v, "/d/f07"); got != "CONTENT"+content(7)[7:] {
		t.Fatalf("vault's f07: %q", got)
	}
}

// Files written through the mount read back right at every size, around
// page boundaries too: the first read-only open after writes hands the
// kernel the file's last page (Mount.prefill with tail), which the writes
// left filled only in part.
func TestReadsAfterWritesThroughTheMount(t *testing.T) {
	m := mountVault(t, testVault(t, vault.Quota{}), Options{QueueCloses: true})
	for _, size := range []int{1, 100, 4095, 4096, 4097, 5000, 8191, 8192, 12000, 100 << 10} {
		p := filepath.Join(m.Dir(), fmt.Sprintf("f%d", size))
		want := pattern(size)
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != string(want) {
			t.Fatalf("%d bytes written, read back %d (%v), equal %v", size, len(got), err, string(got) == string(want))
		}
		// Overwrite inside the last page and append past it, then read.
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		patch := []byte("patched")
		at := max(size-3, 0)
		if _, err := f.WriteAt(patch, int64(at)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want = append(want[:at], patch...)
		if got, err := os.ReadFile(p); err != nil || string(got) != string(want) {
			t.Fatalf("%d bytes patched at %d, read back %d (%v), equal %v", size, at, len(got), err, string(got) == string(want))
		}
	}
}
