package vault

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostTree writes a small host tree: nested directories, a multi-chunk
// file, an executable, a symlink, and known mtimes.
func hostTree(t testing.TB) (string, time.Time) {
	t.Helper()
	dir := t.TempDir()
	mt := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	files := map[string][]byte{
		"a.txt":          []byte("alpha\n"),
		"src/main.go":    []byte("package main\n"),
		"src/deep/x.bin": bytes.Repeat([]byte{1, 2, 3, 4}, 50000), // 200 KB: four chunks
		"run.sh":         []byte("#!/bin/sh\n"),
	}
	for p, data := range files {
		hp := filepath.Join(dir, p)
		must(t, os.MkdirAll(filepath.Dir(hp), 0o755))
		must(t, os.WriteFile(hp, data, 0o644))
		must(t, os.Chtimes(hp, mt, mt))
	}
	must(t, os.Chmod(filepath.Join(dir, "run.sh"), 0o755))
	must(t, os.Symlink("src/main.go", filepath.Join(dir, "link")))
	for _, d := range []string{"src/deep", "src"} {
		must(t, os.Chtimes(filepath.Join(dir, d), mt, mt))
	}
	return dir, mt
}

func TestImportDirExportDirRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "a", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "a")
	host, mt := hostTree(t)
	st, err := v.ImportDir(ctx, host, "/in", Meta{})
	must(t, err)
	if st.Files != 5 || st.Dirs != 2 || st.Bytes != 6+13+200000+10 {
		t.Fatalf("import stats %+v, want 5 files (4 + a symlink), 2 dirs, 200029 bytes", st)
	}
	tree := treeOf(t, v)
	if got := tree["/in/run.sh"]; got != "file:755:#!/bin/sh\n" {
		t.Fatalf("/in/run.sh = %q", got)
	}
	if got := tree["/in/link"]; got != "symlink:src/main.go" {
		t.Fatalf("/in/link = %q", got)
	}
	for _, p := range []string{"/in/src/deep/x.bin", "/in/src/deep", "/in/src"} {
		e, err := v.Stat(ctx, p)
		must(t, err)
		if !e.Mtime.Equal(mt) {
			t.Fatalf("%s mtime %v, want %v (the host's)", p, e.Mtime, mt)
		}
	}
	in, err := v.Info(ctx)
	must(t, err)
	if in.Files != 5 || in.Dirs != 3 || in.Bytes != st.Bytes {
		t.Fatalf("vault counters %+v after import %+v", in, st)
	}

	// Importing again replaces files in place and keeps directories.
	must(t, os.WriteFile(filepath.Join(host, "a.txt"), []byte("changed\n"), 0o600))
	must(t, os.Chmod(filepath.Join(host, "a.txt"), 0o600))
	_, err = v.ImportDir(ctx, host, "/in", Meta{})
	must(t, err)
	if got := treeOf(t, v)["/in/a.txt"]; got != "file:600:changed\n" {
		t.Fatalf("re-import: /in/a.txt = %q", got)
	}

	out := filepath.Join(t.TempDir(), "out")
	est, err := v.ExportDir(ctx, "/in", out)
	must(t, err)
	if est.Files != 5 || est.Dirs != 2 {
		t.Fatalf("export stats %+v", est)
	}
	for _, p := range []string{"a.txt", "src/main.go", "src/deep/x.bin", "run.sh"} {
		want, _ := os.ReadFile(filepath.Join(host, p))
		got, err := os.ReadFile(filepath.Join(out, p))
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("export %s: %d bytes differ from the host's %d", p, len(got), len(want))
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("exported run.sh: %v %v, want mode 0755", fi, err)
	}
	if tgt, err := os.Readlink(filepath.Join(out, "link")); err != nil || tgt != "src/main.go" {
		t.Fatalf("exported link: %q %v", tgt, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "src/deep")); err != nil || !fi.ModTime().Equal(mt) {
		t.Fatalf("exported src/deep mtime: %v %v, want %v", fi.ModTime(), err, mt)
	}
}

func TestImportDirRefusedByQuotaWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	one := int64(1)
	_, err := s.Create(ctx, "default", "q", Quota{MaxSizeMB: &one}, Meta{})
	must(t, err)
	v := s.Vault("default", "q")
	_, err = v.WriteFile(ctx, "/keep.txt", []byte("kept"), WriteOptions{}, Meta{})
	must(t, err)
	before := treeOf(t, v)

	host := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		must(t, os.WriteFile(filepath.Join(host, name), bytes.Repeat([]byte(name), 400<<10), 0o644))
	}
	_, err = v.ImportDir(ctx, host, "/", Meta{})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Limit != "max_size_mb" {
		t.Fatalf("import of 1.2 MB into a 1 MB vault: %v, want a max_size_mb QuotaError", err)
	}
	if want := int64(4 + 3*400<<10); qe.Requested != want || qe.Current != 4 {
		t.Fatalf("quota error %+v: want current 4 and requested %d bytes", qe, want)
	}
	if msg := err.Error(); !strings.Contains(msg, "needs 1228804 bytes") || !strings.Contains(msg, "allows 1048576 bytes") {
		t.Fatalf("message %q: want what it needs and allows in bytes", msg)
	}
	if got := treeOf(t, v); len(got) != len(before) || got["/keep.txt"] != before["/keep.txt"] {
		t.Fatalf("refused import changed the vault: %v, was %v", got, before)
	}

	// Files that already exist count only by their growth: the same
	// import into a vault that holds most of it fits.
	must(t, os.Truncate(filepath.Join(host, "c"), 100))
	_, err = v.ImportDir(ctx, host, "/", Meta{})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(host, "b"), []byte("b"), 0o644))
	must(t, os.WriteFile(filepath.Join(host, "d"), bytes.Repeat([]byte("d"), 300<<10), 0o644))
	_, err = v.ImportDir(ctx, host, "/", Meta{})
	must(t, err)
}

func TestImportDirFailingMidwayLeavesVaultAsItWas(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "m", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "m")
	// The vault has a file where the host has a directory that the walk
	// reaches after other entries were written.
	_, err = v.WriteFile(ctx, "/z", []byte("file"), WriteOptions{}, Meta{})
	must(t, err)
	before := treeOf(t, v)
	host := t.TempDir()
	must(t, os.WriteFile(filepath.Join(host, "a"), []byte("a"), 0o644))
	must(t, os.MkdirAll(filepath.Join(host, "b/c"), 0o755))
	must(t, os.WriteFile(filepath.Join(host, "b/c/f"), []byte("f"), 0o644))
	must(t, os.MkdirAll(filepath.Join(host, "z"), 0o755))
	must(t, os.WriteFile(filepath.Join(host, "z/f"), []byte("f"), 0o644))
	if _, err := v.ImportDir(ctx, host, "/", Meta{}); !errors.Is(err, ErrExists) {
		t.Fatalf("import over a file where the host has a directory: %v, want ErrExists", err)
	}
	if got := treeOf(t, v); len(got) != len(before) || got["/z"] != before["/z"] {
		t.Fatalf("failed import left %v, want the vault as it was: %v", got, before)
	}
	if _, err := v.ImportDir(ctx, filepath.Join(host, "missing"), "/", Meta{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("import of a missing host dir: %v, want ErrNotFound", err)
	}
}

// An export into a directory that holds an earlier export never follows
// the symlinks that export wrote: the vault's content (an agent's) decides
// them, and a followed one would write anywhere on the host.
func TestExportDirReplacesSymlinksInsteadOfFollowing(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "a", Quota{})
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	must(t, os.WriteFile(victim, []byte("host's\n"), 0o644))
	must(t, v.Symlink(ctx, victim, "/x", Meta{}))
	must(t, v.Symlink(ctx, outside, "/d", Meta{}))
	out := t.TempDir()
	_, err := v.ExportDir(ctx, "/", out)
	must(t, err)

	// Now the same names are a file and a directory.
	must(t, v.Remove(ctx, "/x", RemoveOptions{}, Meta{}))
	must(t, v.Remove(ctx, "/d", RemoveOptions{}, Meta{}))
	_, err = v.WriteFile(ctx, "/x", []byte("vault's\n"), WriteOptions{}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/d/planted", []byte("vault's\n"), WriteOptions{Parents: true}, Meta{})
	must(t, err)
	_, err = v.ExportDir(ctx, "/", out)
	must(t, err)

	if b, _ := os.ReadFile(victim); string(b) != "host's\n" {
		t.Fatalf("export wrote through the symlink /x: the host file now holds %q", b)
	}
	if _, err := os.Lstat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("export wrote through the symlink /d into %s: %v", outside, err)
	}
	for p, want := range map[string]string{"x": "vault's\n", "d/planted": "vault's\n"} {
		fi, err := os.Lstat(filepath.Join(out, p))
		must(t, err)
		b, _ := os.ReadFile(filepath.Join(out, p))
		if !fi.Mode().IsRegular() || string(b) != want {
			t.Fatalf("%s after the second export: mode %v, content %q", p, fi.Mode(), b)
		}
	}
	if fi, err := os.Lstat(filepath.Join(out, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("d after the second export: %v %v, want a directory", fi, err)
	}
}

// An export refused for its source (not there, not a directory) makes
// nothing on the host.
func TestExportDirRefusedMakesNothing(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "a", Quota{})
	_, err := v.WriteFile(ctx, "/f", []byte("x"), WriteOptions{}, Meta{})
	must(t, err)
	for _, src := range []string{"/nope", "/f"} {
		out := filepath.Join(t.TempDir(), "out")
		if _, err := v.ExportDir(ctx, src, out); err == nil {
			t.Fatalf("export of %s succeeded", src)
		}
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused export of %s made %s: %v", src, out, err)
		}
	}
}
