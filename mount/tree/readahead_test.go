package tree

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/avfs/avfs/vault"
)

// TestReadAhead reads the files of a directory one after the other: from
// the second, a read caches the next small files with it, and each read
// still returns what the tree shows: a sibling with buffered writes
// reads them, one changed behind the tree's back reads the old content
// until the tree catches up and the new content after, a large one is
// read on its own.
func TestReadAhead(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	content := map[string]string{}
	for i, n := range names {
		content[n] = fmt.Sprintf("file %s: %d", n, i)
		if n == "f" {
			content[n] = string(pattern(readAheadSize + 1))
		}
		if _, err := v.WriteFile(ctx, "/d/"+n, []byte(content[n]), vault.WriteOptions{Parents: true}, vault.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	tr := testTree(t, v, Options{Poll: -1})
	d, errno := tr.Lookup(ctx, tr.Root(), "d")
	if errno != 0 {
		t.Fatal(errno)
	}
	entry := func(name string) *Entry {
		t.Helper()
		e, errno := tr.Lookup(ctx, d, name)
		if errno != 0 {
			t.Fatalf("lookup %s: %v", name, errno)
		}
		return e
	}
	read := func(name string) string {
		t.Helper()
		f, _, errno := tr.Open(ctx, entry(name), syscall.O_RDONLY)
		if errno != 0 {
			t.Fatalf("open %s: %v", name, errno)
		}
		defer tr.Release(ctx, f)
		buf := make([]byte, 2*readAheadSize)
		n, errno := tr.Read(ctx, f, buf, 0)
		if errno != 0 {
			t.Fatalf("read %s: %v", name, errno)
		}
		return string(buf[:n])
	}
	cached := func(name string) bool {
		e := entry(name)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return e.cached != nil
	}
	// c has buffered writes while b's read reads ahead.
	fc, _, errno := tr.Open(ctx, entry("c"), syscall.O_WRONLY)
	if errno != 0 {
		t.Fatal(errno)
	}
	if errno := tr.Write(ctx, fc, []byte("FILE"), 0); errno != 0 {
		t.Fatal(errno)
	}
	// d changes behind the tree's back.
	if _, err := v.WriteFile(ctx, "/d/d", []byte("changed elsewhere"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if got := read("a"); got != content["a"] {
		t.Fatalf("a: %q, want %q", got, content["a"])
	}
	if cached("b") {
		t.Fatal("the first read of a directory read ahead")
	}
	if got := read("b"); got != content["b"] {
		t.Fatalf("b: %q, want %q", got, content["b"])
	}
	for _, n := range []string{"e", "g"} {
		if !cached(n) {
			t.Errorf("%s not cached after the second read of its directory", n)
		}
	}
	for _, n := range []string{"c", "d", "f"} {
		if cached(n) {
			t.Errorf("%s cached by a read ahead (buffered writes, changed elsewhere, or large)", n)
		}
	}
	if got, want := read("c"), "FILE"+content["c"][4:]; got != want {
		t.Errorf("c: %q, want %q", got, want)
	}
	tr.Release(ctx, fc)
	for _, n := range []string{"e", "f", "g"} {
		if got := read(n); got != content[n] {
			t.Errorf("%s: %d bytes, want %d", n, len(got), len(content[n]))
		}
	}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read("d"); got != "changed elsewhere" {
		t.Errorf("d after catching up: %q, want the content written behind the tree's back", got)
	}
}
