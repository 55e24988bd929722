package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newVault creates vault ns "default", name, with quota q, in s.
func newVault(t testing.TB, s *Store, name string, q Quota) *Vault {
	t.Helper()
	if _, err := s.Create(context.Background(), "default", name, q, Meta{}); err != nil {
		t.Fatal(err)
	}
	return s.Vault("default", name)
}

func mustWrite(t testing.TB, v *Vault, p string, data []byte) {
	t.Helper()
	if _, err := v.WriteFile(context.Background(), p, data, WriteOptions{Parents: true}, Meta{}); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func mustRead(t testing.TB, v *Vault, p string, want []byte) {
	t.Helper()
	got, _, err := v.ReadFile(context.Background(), p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s: got %d bytes %q, want %d bytes %q", p, len(got), trunc(got), len(want), trunc(want))
	}
}

func trunc(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}

func countRows(t testing.TB, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// snapshot is everything a user can observe of a vault.
type snapshot struct {
	tree   map[string]rentry
	info   Info
	events int
}

func takeSnapshot(t testing.TB, v *Vault) snapshot {
	t.Helper()
	ctx := context.Background()
	tree, err := readLive(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	info, err := v.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := v.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{tree: tree, info: info, events: len(ev)}
}

// checkUnchanged fails if v differs from snapshot before.
func checkUnchanged(t testing.TB, v *Vault, before snapshot) {
	t.Helper()
	after := takeSnapshot(t, v)
	for _, p := range sortedKeys(before.tree) {
		if !reflect.DeepEqual(after.tree[p], before.tree[p]) {
			t.Fatalf("%s changed: got %+v, want %+v", p, after.tree[p].e, before.tree[p].e)
		}
	}
	for _, p := range sortedKeys(after.tree) {
		if _, ok := before.tree[p]; !ok {
			t.Fatalf("%s appeared (%s), want the vault unchanged", p, after.tree[p].e.Kind)
		}
	}
	if !reflect.DeepEqual(after.info, before.info) {
		t.Fatalf("info: got %+v, want %+v", after.info, before.info)
	}
	if after.events != before.events {
		t.Fatalf("audit events: got %d, want %d", after.events, before.events)
	}
}

func TestPathValidation(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/dir/file", []byte("x"))
	before := takeSnapshot(t, v)

	bad := map[string]string{
		"empty":          "",
		"relative":       "dir/file",
		"dot":            ".",
		"dotdot":         "/..",
		"dotdot inside":  "/dir/../dir/file",
		"dotdot at end":  "/dir/..",
		"NUL":            "/dir/fi\x00le",
		"invalid UTF-8":  "/dir/\xff",
		"name too long":  "/" + strings.Repeat("n", MaxNameLen+1),
		"path too long":  strings.Repeat("/abcdefgh", MaxTreePathLen/9+1),
		"relative dot":   "./dir",
		"bare dotdot":    "..",
		"dotdot escapes": "/../../etc/passwd",
	}
	ops := map[string]func(p string) error{
		"WriteFile": func(p string) error {
			_, err := v.WriteFile(ctx, p, []byte("y"), WriteOptions{Parents: true}, Meta{})
			return err
		},
		"WriteAt":  func(p string) error { _, err := v.WriteAt(ctx, p, 0, []byte("y"), Meta{}); return err },
		"Truncate": func(p string) error { return v.Truncate(ctx, p, 0, Meta{}) },
		"Mkdir":    func(p string) error { return v.Mkdir(ctx, p, 0, false, Meta{}) },
		"MkdirAll": func(p string) error { return v.Mkdir(ctx, p, 0, true, Meta{}) },
		"Symlink":  func(p string) error { return v.Symlink(ctx, "/dir/file", p, Meta{}) },
		"Remove":   func(p string) error { return v.Remove(ctx, p, RemoveOptions{Recursive: true}, Meta{}) },
		"RenameSrc": func(p string) error {
			return v.Rename(ctx, p, "/moved", RenameOptions{}, Meta{})
		},
		"RenameDst": func(p string) error {
			return v.Rename(ctx, "/dir/file", p, RenameOptions{}, Meta{})
		},
		"CopySrc": func(p string) error { return v.Copy(ctx, p, "/copied", true, Meta{}) },
		"CopyDst": func(p string) error { return v.Copy(ctx, "/dir", p, true, Meta{}) },
		"SetAttr": func(p string) error {
			m := fs.FileMode(0o600)
			_, err := v.SetAttr(ctx, p, &m, nil, Meta{})
			return err
		},
		"Stat":     func(p string) error { _, err := v.Stat(ctx, p); return err },
		"ReadFile": func(p string) error { _, _, err := v.ReadFile(ctx, p); return err },
		"ReadAt":   func(p string) error { _, err := v.ReadAt(ctx, p, 0, make([]byte, 1)); return err },
		"ReadDir":  func(p string) error { _, err := v.ReadDir(ctx, p); return err },
	}
	for _, bn := range sortedKeys(bad) {
		for _, on := range sortedKeys(ops) {
			err := ops[on](bad[bn])
			if !errors.Is(err, ErrInvalidPath) {
				t.Errorf("%s(%s %q): got %v, want %v", on, bn, trunc([]byte(bad[bn])), err, ErrInvalidPath)
			}
		}
	}
	checkUnchanged(t, v, before)

	// The limits themselves are fine, and "." and empty components are
	// dropped rather than rejected.
	long := "/" + strings.Repeat("n", MaxNameLen)
	mustWrite(t, v, long, []byte("255"))
	mustRead(t, v, long, []byte("255"))
	for _, p := range []string{"/dir/./file", "//dir//file/", "/./dir/file"} {
		mustRead(t, v, p, []byte("x"))
	}
	// A symlink's target is data, not a path the vault follows.
	if err := v.Symlink(ctx, "../../etc/passwd", "/link", Meta{}); err != nil {
		t.Fatalf("symlink with .. target: got %v, want success", err)
	}
	if _, _, err := v.ReadFile(ctx, "/link"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("read through symlink: got %v, want %v", err, ErrInvalidArgument)
	}
}

func ptr(n int64) *int64 { return &n }

const kib = 1 << 10

func TestQuotaEveryWritePath(t *testing.T) {
	ctx := context.Background()
	data := func(n int) []byte { return content(n, n) }
	write := func(p string, n int) func(t testing.TB, v *Vault) {
		return func(t testing.TB, v *Vault) { mustWrite(t, v, p, data(n)) }
	}
	both := func(fs ...func(t testing.TB, v *Vault)) func(t testing.TB, v *Vault) {
		return func(t testing.TB, v *Vault) {
			for _, f := range fs {
				f(t, v)
			}
		}
	}
	mkdir := func(p string) func(t testing.TB, v *Vault) {
		return func(t testing.TB, v *Vault) {
			if err := v.Mkdir(ctx, p, 0, true, Meta{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mb1 := Quota{MaxSizeMB: ptr(1)}
	cases := []struct {
		name  string
		quota Quota
		setup func(t testing.TB, v *Vault)
		op    func(v *Vault) error
		want  QuotaError
	}{
		{
			name: "WriteFile create", quota: mb1, setup: write("/a", 600*kib),
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/b", data(500*kib), WriteOptions{}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 600 * kib, Requested: 1100 * kib},
		},
		{
			name: "WriteFile overwrite", quota: mb1, setup: both(write("/a", 600*kib), write("/b", 100*kib)),
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/b", data(500*kib), WriteOptions{}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 700 * kib, Requested: 1100 * kib},
		},
		{
			name: "WriteFile append", quota: mb1, setup: write("/a", 1000*kib),
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/a", data(100*kib), WriteOptions{Append: true}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 1000 * kib, Requested: 1100 * kib},
		},
		{
			name: "WriteFile max file size", quota: Quota{MaxFileSizeMB: ptr(1)},
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/big", data(1<<20+1), WriteOptions{}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_file_size_mb", Max: 1, Current: 0, Requested: 1<<20 + 1},
		},
		{
			name: "WriteFile max files", quota: Quota{MaxFiles: ptr(2)}, setup: both(write("/a", 1), mkdir("/d")),
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/d/b", data(1), WriteOptions{}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_files", Max: 2, Current: 2, Requested: 3},
		},
		{
			name: "WriteFile parents", quota: Quota{MaxFiles: ptr(3)}, setup: write("/a", 1),
			op: func(v *Vault) error {
				_, err := v.WriteFile(ctx, "/x/y/f", data(1), WriteOptions{Parents: true}, Meta{})
				return err
			},
			want: QuotaError{Limit: "max_files", Max: 3, Current: 1, Requested: 4},
		},
		{
			name: "WriteAt past end", quota: mb1, setup: write("/a", 100),
			op: func(v *Vault) error {
				_, err := v.WriteAt(ctx, "/a", 1<<20, data(10), Meta{})
				return err
			},
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 100, Requested: 1<<20 + 10},
		},
		{
			name: "WriteAt max file size", quota: Quota{MaxFileSizeMB: ptr(1)}, setup: write("/a", 1<<20),
			op: func(v *Vault) error {
				_, err := v.WriteAt(ctx, "/a", 1<<20-1, data(2), Meta{})
				return err
			},
			want: QuotaError{Limit: "max_file_size_mb", Max: 1, Current: 1 << 20, Requested: 1<<20 + 1},
		},
		{
			name: "Truncate grow", quota: mb1, setup: write("/a", 10),
			op:   func(v *Vault) error { return v.Truncate(ctx, "/a", 2<<20, Meta{}) },
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 10, Requested: 2 << 20},
		},
		{
			name: "Mkdir", quota: Quota{MaxFiles: ptr(2)}, setup: both(write("/a", 1), mkdir("/d")),
			op:   func(v *Vault) error { return v.Mkdir(ctx, "/e", 0, false, Meta{}) },
			want: QuotaError{Limit: "max_files", Max: 2, Current: 2, Requested: 3},
		},
		{
			name: "Mkdir parents", quota: Quota{MaxFiles: ptr(3)}, setup: write("/a", 1),
			op:   func(v *Vault) error { return v.Mkdir(ctx, "/x/y/z", 0, true, Meta{}) },
			want: QuotaError{Limit: "max_files", Max: 3, Current: 1, Requested: 4},
		},
		{
			name: "Symlink", quota: Quota{MaxFiles: ptr(1)}, setup: write("/a", 1),
			op:   func(v *Vault) error { return v.Symlink(ctx, "a", "/l", Meta{}) },
			want: QuotaError{Limit: "max_files", Max: 1, Current: 1, Requested: 2},
		},
		{
			name: "Copy file", quota: mb1, setup: write("/a", 600*kib),
			op:   func(v *Vault) error { return v.Copy(ctx, "/a", "/b", false, Meta{}) },
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 600 * kib, Requested: 1200 * kib},
		},
		{
			name: "Copy dir bytes", quota: mb1, setup: both(write("/d/1", 300*kib), write("/d/2", 300*kib)),
			op:   func(v *Vault) error { return v.Copy(ctx, "/d", "/e", true, Meta{}) },
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 600 * kib, Requested: 1200 * kib},
		},
		{
			name: "Copy dir entries", quota: Quota{MaxFiles: ptr(5)}, setup: both(write("/d/1", 1), write("/d/2", 1), write("/d/3", 1)),
			op:   func(v *Vault) error { return v.Copy(ctx, "/d", "/e", true, Meta{}) },
			want: QuotaError{Limit: "max_files", Max: 5, Current: 4, Requested: 8},
		},
		{
			// In a batch the failing write is measured against the usage
			// the batch reached so far; the whole batch is rolled back.
			name: "Update batch", quota: mb1, setup: write("/a", 100*kib),
			op: func(v *Vault) error {
				return v.Update(ctx, Meta{}, func(tx *Tx) error {
					if _, err := tx.WriteFile("/b", data(500*kib), WriteOptions{}); err != nil {
						return err
					}
					if err := tx.Mkdir("/d", 0, false); err != nil {
						return err
					}
					_, err := tx.WriteFile("/d/c", data(500*kib), WriteOptions{})
					return err
				})
			},
			want: QuotaError{Limit: "max_size_mb", Max: 1, Current: 600 * kib, Requested: 1100 * kib},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			v := newVault(t, s, fmt.Sprintf("q%d", i), c.quota)
			if c.setup != nil {
				c.setup(t, v)
			}
			before := takeSnapshot(t, v)
			err := c.op(v)
			if !errors.Is(err, ErrQuota) {
				t.Fatalf("got %v, want %v", err, ErrQuota)
			}
			var qe *QuotaError
			if !errors.As(err, &qe) {
				t.Fatalf("got %T %v, want a *QuotaError", err, err)
			}
			want := c.want
			if want.Limit == "max_size_mb" {
				want.Mode = QuotaLogical // the default mode, named in the error
			}
			if *qe != want {
				t.Fatalf("got %+v, want %+v", *qe, want)
			}
			checkUnchanged(t, v, before)
		})
	}

	t.Run("shrinking over quota", func(t *testing.T) {
		// A lowered limit stops growth only: shrinking and removing work.
		s := openTestStore(t)
		v := newVault(t, s, "q", Quota{})
		mustWrite(t, v, "/a", data(600*kib))
		mustWrite(t, v, "/b", data(600*kib))
		if _, err := v.SetQuota(ctx, Quota{MaxSizeMB: ptr(1), MaxFiles: ptr(1)}, Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteFile(ctx, "/a", data(10), WriteOptions{}, Meta{}); err != nil {
			t.Fatalf("shrinking write over quota: got %v, want success", err)
		}
		if err := v.Truncate(ctx, "/b", 5, Meta{}); err != nil {
			t.Fatalf("shrinking truncate over quota: got %v, want success", err)
		}
		if err := v.Remove(ctx, "/b", RemoveOptions{}, Meta{}); err != nil {
			t.Fatalf("remove over quota: got %v, want success", err)
		}
		if err := v.Mkdir(ctx, "/d", 0, false, Meta{}); !errors.Is(err, ErrQuota) {
			t.Fatalf("mkdir at max_files: got %v, want %v", err, ErrQuota)
		}
	})
}

func TestRequestIDIdempotent(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/log", []byte("x"))
	meta := Meta{Actor: "agent", RequestID: "req-1"}
	first, err := v.WriteFile(ctx, "/log", []byte("ab"), WriteOptions{Append: true}, meta)
	if err != nil {
		t.Fatal(err)
	}
	second, err := v.WriteFile(ctx, "/log", []byte("ab"), WriteOptions{Append: true}, meta)
	if err != nil {
		t.Fatal(err)
	}
	if want := (WriteResult{Path: "/log", Size: 3}); first != want || second != want {
		t.Fatalf("results: got %+v and %+v, want %+v twice", first, second, want)
	}
	mustRead(t, v, "/log", []byte("xab"))
	ev, err := v.Audit(ctx, AuditFilter{Action: "file.write", Path: "/log"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 2 {
		t.Fatalf("file.write events: got %d, want 2 (create, one append)", len(ev))
	}

	// The same id for another operation is a conflict and changes nothing.
	before := takeSnapshot(t, v)
	if err := v.Mkdir(ctx, "/d", 0, false, meta); !errors.Is(err, ErrConflict) {
		t.Fatalf("reused request id: got %v, want %v", err, ErrConflict)
	}
	if _, err := v.WriteAt(ctx, "/log", 0, []byte("z"), meta); !errors.Is(err, ErrConflict) {
		t.Fatalf("reused request id for write_at: got %v, want %v", err, ErrConflict)
	}
	checkUnchanged(t, v, before)

	// A request that failed left no result: its retry runs.
	retry := Meta{RequestID: "req-2"}
	if err := v.Mkdir(ctx, "/log", 0, false, retry); !errors.Is(err, ErrExists) {
		t.Fatalf("mkdir over a file: got %v, want %v", err, ErrExists)
	}
	if err := v.Remove(ctx, "/log", RemoveOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Mkdir(ctx, "/log", 0, false, retry); err != nil {
		t.Fatalf("retry of a failed request: got %v, want success", err)
	}
	if e, err := v.Stat(ctx, "/log"); err != nil || e.Kind != KindDir {
		t.Fatalf("after retry: got %+v, %v, want a directory", e, err)
	}
}

// fileChunks returns the chunk hash list of file p.
func fileChunks(t testing.TB, v *Vault, p string) []byte {
	t.Helper()
	var list []byte
	err := v.View(context.Background(), func(tx *Tx) error {
		_, chain, _, err := tx.fileChain("stat", p)
		if err != nil {
			return err
		}
		list = chain[len(chain)-1].chunks
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestPartialWriteRewritesOnlyTouchedChunks(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	want := content(7, 1<<20)
	mustWrite(t, v, "/big", want)
	if got := countRows(t, s, "chunks"); got != 16 {
		t.Fatalf("chunks of a 1 MiB file: got %d, want 16", got)
	}
	for _, c := range []struct {
		name    string
		off     int
		data    string
		changed []int // indexes of the chunks the write touches
		frozen  bool  // write after a checkpoint: the file's node is shared
	}{
		{name: "inside one chunk", off: 3*ChunkSize + 100, data: "hello", changed: []int{3}},
		{name: "across a boundary", off: 5*ChunkSize - 2, data: "abcd", changed: []int{4, 5}},
		{name: "first byte", off: 0, data: "Z", changed: []int{0}},
		{name: "after a checkpoint", off: 9 * ChunkSize, data: "cp", changed: []int{9}, frozen: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.frozen {
				if _, err := v.SaveCheckpoint(ctx, "cp", "", false, Meta{}); err != nil {
					t.Fatal(err)
				}
			}
			chunks0, nodes0 := countRows(t, s, "chunks"), countRows(t, s, "nodes")
			list0 := fileChunks(t, v, "/big")
			if _, err := v.WriteAt(ctx, "/big", int64(c.off), []byte(c.data), Meta{}); err != nil {
				t.Fatal(err)
			}
			copy(want[c.off:], c.data)
			if got := countRows(t, s, "chunks") - chunks0; got != len(c.changed) {
				t.Fatalf("new chunk rows: got %d, want %d", got, len(c.changed))
			}
			// In place when the node is the vault's own; after a checkpoint
			// only the root and the file are copied.
			wantNodes := 0
			if c.frozen {
				wantNodes = 2
			}
			if got := countRows(t, s, "nodes") - nodes0; got != wantNodes {
				t.Fatalf("new node rows: got %d, want %d", got, wantNodes)
			}
			list1 := fileChunks(t, v, "/big")
			for i := range 16 {
				changed := !bytes.Equal(list0[i*hashLen:(i+1)*hashLen], list1[i*hashLen:(i+1)*hashLen])
				if wantChanged := contains(c.changed, i); changed != wantChanged {
					t.Fatalf("chunk %d changed: got %v, want %v", i, changed, wantChanged)
				}
			}
			mustRead(t, v, "/big", want)
		})
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// fillVault writes a small tree: n files in a few directories.
func fillVault(t testing.TB, v *Vault, n int) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := v.Update(context.Background(), Meta{}, func(tx *Tx) error {
		for i := range n {
			p := fmt.Sprintf("/d%d/f%d", i%5, i)
			files[p] = content(i, 100+i*37)
			if _, err := tx.WriteFile(p, files[p], WriteOptions{Parents: true}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func checkFiles(t testing.TB, v *Vault, files map[string][]byte) {
	t.Helper()
	for _, p := range sortedKeys(files) {
		mustRead(t, v, p, files[p])
	}
	in, err := v.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.Files != int64(len(files)) {
		t.Fatalf("%s files: got %d, want %d", v.Name(), in.Files, len(files))
	}
}

func TestForkCopiesNothing(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	files := fillVault(t, v, 200)
	if _, err := v.SaveCheckpoint(ctx, "cp", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	tables := []string{"nodes", "dirents", "chunks"}
	before := map[string]int{}
	for _, tb := range tables {
		before[tb] = countRows(t, s, tb)
	}
	for i := range 10 {
		cp := ""
		if i%2 == 1 {
			cp = "cp"
		}
		if _, err := s.Fork(ctx, "default", "a", fmt.Sprintf("f%d", i), cp, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range tables {
		if got := countRows(t, s, tb); got != before[tb] {
			t.Fatalf("%s rows after 10 forks: got %d, want %d", tb, got, before[tb])
		}
	}
	for i := range 10 {
		checkFiles(t, s.Vault("default", fmt.Sprintf("f%d", i)), files)
	}
	// Inode numbers are the source's.
	a, err := v.Stat(ctx, "/d1/f1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Vault("default", "f3").Stat(ctx, "/d1/f1")
	if err != nil {
		t.Fatal(err)
	}
	if f.Ino != a.Ino {
		t.Fatalf("fork inode: got %d, want %d", f.Ino, a.Ino)
	}
}

func TestForkOfForkSurvivesAncestors(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	a := newVault(t, s, "a", Quota{})
	files := fillVault(t, a, 30)
	if _, err := a.SaveCheckpoint(ctx, "a-cp", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "a", "b", "", Meta{}); err != nil {
		t.Fatal(err)
	}
	b := s.Vault("default", "b")
	mustWrite(t, b, "/d1/f1", []byte("b's"))
	files["/d1/f1"] = []byte("b's")
	mustWrite(t, b, "/b-only", []byte("b"))
	files["/b-only"] = []byte("b")
	if _, err := b.SaveCheckpoint(ctx, "b-cp", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "b", "c", "", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "b", "c2", "b-cp", Meta{}); err != nil {
		t.Fatal(err)
	}
	// Both ancestors change and go away.
	mustWrite(t, a, "/d2/f2", []byte("a changed"))
	mustWrite(t, b, "/d3/f3", []byte("b changed"))
	for _, name := range []string{"a", "b"} {
		if err := s.Delete(ctx, "default", name, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	c, c2 := s.Vault("default", "c"), s.Vault("default", "c2")
	checkFiles(t, c, files)
	checkFiles(t, c2, files)
	mustWrite(t, c, "/d4/f4", []byte("c writes"))
	mustRead(t, c2, "/d4/f4", files["/d4/f4"])
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Parent == nil || *in.Parent != "b" {
		t.Fatalf("c's parent: got %v, want b", in.Parent)
	}
}

func TestRestoreAtomicForReaders(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	writePair := func(gen string) error {
		return v.Update(ctx, Meta{}, func(tx *Tx) error {
			// Large enough to span chunks, so a torn state would show.
			data := append(bytes.Repeat([]byte("."), ChunkSize), gen...)
			for _, p := range []string{"/x", "/y"} {
				if _, err := tx.WriteFile(p, data, WriteOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, gen := range []string{"one", "two"} {
		if err := writePair(gen); err != nil {
			t.Fatal(err)
		}
		if _, err := v.SaveCheckpoint(ctx, gen, "", false, Meta{}); err != nil {
			t.Fatal(err)
		}
	}

	const wantRestores, wantReads = 60, 300
	var restores, writes, reads atomic.Int64
	// stop ends all three goroutines once the reader has seen enough, or
	// as soon as one of them fails.
	stop := make(chan struct{})
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; close(stop) })
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { // restorer
		for i := 0; !stopped(); i++ {
			if _, err := v.RestoreCheckpoint(ctx, []string{"one", "two"}[i%2], Meta{}); err != nil {
				fail(fmt.Errorf("restore: %w", err))
				return
			}
			restores.Add(1)
		}
	})
	wg.Go(func() { // writer: x and y always change together
		for i := 0; !stopped(); i++ {
			if err := writePair(fmt.Sprintf("w%d", i)); err != nil {
				fail(fmt.Errorf("write: %w", err))
				return
			}
			writes.Add(1)
		}
	})
	wg.Go(func() { // reader
		for !stopped() {
			if restores.Load() >= wantRestores && reads.Load() >= wantReads {
				fail(nil)
				return
			}
			var x, y []byte
			err := v.View(ctx, func(tx *Tx) error {
				var err error
				if x, _, err = tx.ReadFile("/x"); err != nil {
					return err
				}
				y, _, err = tx.ReadFile("/y")
				return err
			})
			if err != nil {
				fail(fmt.Errorf("read: %w", err))
				return
			}
			if !bytes.Equal(x, y) {
				fail(fmt.Errorf("reader saw a mix: /x ends %q, /y ends %q", x[ChunkSize:], y[ChunkSize:]))
				return
			}
			reads.Add(1)
		}
	})
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	t.Logf("%d reads, %d restores, %d writes", reads.Load(), restores.Load(), writes.Load())
}

func TestTwoStoresOnOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	var stores [2]*Store
	for i := range stores {
		s, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	newVault(t, stores[0], "a", Quota{})
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range stores {
		wg.Go(func() {
			v := s.Vault("default", "a")
			for j := range n {
				// Its own file, an append to a shared one, and a batch.
				if _, err := v.WriteFile(ctx, fmt.Sprintf("/s%d/f%d", i, j), []byte(fmt.Sprint(i, j)), WriteOptions{Parents: true}, Meta{}); err != nil {
					errs <- err
					return
				}
				if _, err := v.WriteFile(ctx, "/log", []byte(fmt.Sprintf("%d %d\n", i, j)), WriteOptions{Append: true}, Meta{}); err != nil {
					errs <- err
					return
				}
				err := v.Update(ctx, Meta{}, func(tx *Tx) error {
					for k := range 3 {
						if _, err := tx.WriteFile(fmt.Sprintf("/s%d/b%d-%d", i, j, k), []byte("b"), WriteOptions{}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, s := range stores {
		v := s.Vault("default", "a")
		for j := range n {
			mustRead(t, v, fmt.Sprintf("/s%d/f%d", i, j), []byte(fmt.Sprint(i, j)))
		}
		log, _, err := v.ReadFile(ctx, "/log")
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSuffix(string(log), "\n"), "\n") {
			lines[l] = true
		}
		if len(lines) != 2*n {
			t.Fatalf("store %d: /log has %d distinct lines, want %d", i, len(lines), 2*n)
		}
		in, err := v.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(2*n + 2*3*n + 1); in.Files != want || in.Dirs != 2 {
			t.Fatalf("store %d: got files=%d dirs=%d, want %d 2", i, in.Files, in.Dirs, want)
		}
	}
	if err := stores[1].IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
}

// stepClock is a clock for Options.Now that advances one second a call.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

func TestAudit(t *testing.T) {
	ctx := context.Background()
	clock := &stepClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, err := Open(ctx, filepath.Join(t.TempDir(), "store.db"), Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	meta := func(i int) Meta {
		return Meta{Actor: "agent-7", RequestID: fmt.Sprintf("req-%d", i), TraceID: fmt.Sprintf("trace-%d", i)}
	}
	if _, err := s.Create(ctx, "default", "a", Quota{}, meta(0)); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("default", "a")
	steps := []func(m Meta) error{
		func(m Meta) error {
			_, err := v.WriteFile(ctx, "/src/a.go", []byte("package a"), WriteOptions{Parents: true}, m)
			return err
		},
		func(m Meta) error { return v.Mkdir(ctx, "/srcx", 0, false, m) },
		func(m Meta) error {
			_, err := v.WriteFile(ctx, "/srcx/b.go", []byte("package b"), WriteOptions{}, m)
			return err
		},
		func(m Meta) error { _, err := v.SaveCheckpoint(ctx, "cp", "", false, m); return err },
		func(m Meta) error { return v.Truncate(ctx, "/src/a.go", 3, m) },
		func(m Meta) error { return v.Rename(ctx, "/src/a.go", "/src/c.go", RenameOptions{}, m) },
	}
	for i, step := range steps {
		if err := step(meta(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := v.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantActions := []string{"vault.create", "file.write", "dir.create", "file.write", "checkpoint.save", "file.truncate", "rename"}
	wantPaths := []string{"/", "/src/a.go", "/srcx", "/srcx/b.go", "/", "/src/a.go", "/src/a.go"}
	if len(all) != len(wantActions) {
		t.Fatalf("events: got %d %+v, want %d", len(all), all, len(wantActions))
	}
	for i, e := range all {
		m := meta(i)
		if e.Action != wantActions[i] || e.Path != wantPaths[i] || e.Actor != m.Actor || e.RequestID != m.RequestID ||
			e.TraceID != m.TraceID || e.Namespace != "default" || e.Vault != "a" {
			t.Fatalf("event %d: got %+v, want %s %s by %s, request %s, trace %s", i, e, wantActions[i], wantPaths[i], m.Actor, m.RequestID, m.TraceID)
		}
		if i > 0 && !e.Time.After(all[i-1].Time) {
			t.Fatalf("event %d time %v not after event %d's %v", i, e.Time, i-1, all[i-1].Time)
		}
	}
	if got := all[6].Details["to"]; got != "/src/c.go" {
		t.Fatalf("rename details to: got %v, want /src/c.go", got)
	}
	if got := all[5].Details["size"]; got != float64(3) {
		t.Fatalf("truncate details size: got %v, want 3", got)
	}

	ids := func(es []Event) []int64 {
		out := []int64{}
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	pick := func(idx ...int) []int64 {
		out := []int64{}
		for _, i := range idx {
			out = append(out, all[i].ID)
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    AuditFilter
		want []int64
	}{
		{"action prefix", AuditFilter{Action: "file."}, pick(1, 3, 5)},
		{"action star", AuditFilter{Action: "checkpoint.*"}, pick(4)},
		{"action exact", AuditFilter{Action: "rename"}, pick(6)},
		{"action exact no prefix", AuditFilter{Action: "file"}, pick()},
		{"path prefix", AuditFilter{Path: "/src"}, pick(1, 5, 6)},
		{"path prefix slash", AuditFilter{Path: "/src/"}, pick(1, 5, 6)},
		{"path exact file", AuditFilter{Path: "/srcx/b.go"}, pick(3)},
		{"since", AuditFilter{Since: all[3].Time}, pick(3, 4, 5, 6)},
		{"limit keeps newest", AuditFilter{Limit: 2}, pick(5, 6)},
		{"after id", AuditFilter{AfterID: all[4].ID}, pick(5, 6)},
		{"combined", AuditFilter{Action: "file.", Path: "/src", Since: all[2].Time, Limit: 5}, pick(5)},
	} {
		got, err := v.Audit(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(ids(got), c.want) {
			t.Errorf("%s: got ids %v, want %v", c.name, ids(got), c.want)
		}
	}

	// A deleted vault's history does not leak into a vault created after
	// it, whatever id the database hands out.
	b := newVault(t, s, "b", Quota{})
	mustWrite(t, b, "/secret", []byte("b"))
	if err := s.Delete(ctx, "default", "b", Meta{}); err != nil {
		t.Fatal(err)
	}
	c := newVault(t, s, "c", Quota{})
	ev, err := c.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != 1 || ev[0].Action != "vault.create" || ev[0].Vault != "c" {
		t.Fatalf("new vault's audit: got %+v, want only its vault.create", ev)
	}
}
