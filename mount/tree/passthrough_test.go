package tree

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A checked-out backing file is out of the cache (no other file can get
// it, so writes to it reach nobody else) until it is checked back in
// under the key of its content; a leftover of a dead process is removed
// by the next OpenBacking, one still held is not.
func TestBackingCheckout(t *testing.T) {
	dir := t.TempDir()
	b, err := OpenBacking(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("ab", 32)
	content := bytes.Repeat([]byte("x"), 4096)
	fill := func(w io.Writer) error { _, err := w.Write(content); return err }
	f, priv, err := b.checkout(key, int64(len(content)), fill)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, key)); !os.IsNotExist(err) {
		t.Fatalf("cache file while checked out: %v, want it gone", err)
	}
	if b.Bytes() != 0 {
		t.Fatalf("cache counts %d bytes while its only file is checked out, want 0", b.Bytes())
	}
	if _, err := f.WriteAt([]byte("y"), 0); err != nil {
		t.Fatalf("write to a checked-out file: %v", err)
	}
	// A second user of the key, meanwhile, fills its own copy.
	g, priv2, err := b.checkout(key, int64(len(content)), fill)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	g.ReadAt(got, 0)
	if got[0] != 'x' {
		t.Fatalf("second checkout reads %q, want the content's x", got)
	}
	b.checkin(f, priv, "") // written: not any key's content
	b.checkin(g, priv2, key)
	data, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil || !bytes.Equal(data, content) {
		t.Fatalf("cache file after check-in: %d bytes, %v; want the content", len(data), err)
	}
	if b.Bytes() != int64(len(content)) {
		t.Fatalf("cache counts %d bytes, want %d", b.Bytes(), len(content))
	}

	// Leftovers: one held (a live process's), one not (a dead one's).
	held, heldPriv, err := b.checkout(key, int64(len(content)), fill)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dead := filepath.Join(dir, privPrefix+"1-1")
	if err := os.WriteFile(dead, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBacking(dir, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("a dead process's checked-out file: %v, want it removed", err)
	}
	if _, err := os.Stat(heldPriv); err != nil {
		t.Fatalf("a live checkout: %v, want it kept", err)
	}
}
