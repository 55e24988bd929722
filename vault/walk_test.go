package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
)

// Tests for the statement-saving paths: joined and recursive path walks,
// the one-statement ReadFile and Stat, lazy chunk lists and the packed
// directory listings of diff. Each compares the fast answer with the one
// the plain read transaction gives.

func newTestVault(t *testing.T) (*Store, *Vault) {
	t.Helper()
	s := openTestStore(t)
	if _, err := s.Create(context.Background(), "default", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	return s, s.Vault("default", "v")
}

// checkFastMatchesTx compares Vault.ReadFile and Vault.Stat, which try the
// one-statement path first, with the same calls inside a read transaction.
func checkFastMatchesTx(t *testing.T, v *Vault, p string) {
	t.Helper()
	ctx := context.Background()
	data, e, err := v.ReadFile(ctx, p)
	var tdata []byte
	var te, tse Entry
	var terr, tserr error
	if err := v.View(ctx, func(tx *Tx) error {
		tdata, te, terr = tx.ReadFile(p)
		tse, tserr = tx.Stat(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(err) != fmt.Sprint(terr) || !bytes.Equal(data, tdata) || (data == nil) != (tdata == nil) || e != te {
		t.Errorf("ReadFile(%q) = %d bytes, %+v, %v; in a transaction %d bytes, %+v, %v", p, len(data), e, err, len(tdata), te, terr)
	}
	se, serr := v.Stat(ctx, p)
	if fmt.Sprint(serr) != fmt.Sprint(tserr) || se != tse {
		t.Errorf("Stat(%q) = %+v, %v; in a transaction %+v, %v", p, se, serr, tse, tserr)
	}
}

func TestFastReadMatchesTx(t *testing.T) {
	ctx := context.Background()
	_, v := newTestVault(t)
	_, err := v.WriteFile(ctx, "/a/b/small.txt", []byte("hello"), WriteOptions{Parents: true}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/a/empty", nil, WriteOptions{}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/a/one-chunk", content(1, ChunkSize), WriteOptions{}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/a/two-chunks", content(2, ChunkSize+1), WriteOptions{}, Meta{})
	must(t, err)
	must(t, v.Symlink(ctx, "b/small.txt", "/a/link", Meta{}))
	for _, p := range []string{
		"/", "/a", "/a/b", "/a/b/small.txt", "/a//b/./small.txt", "/a/empty", "/a/one-chunk", "/a/two-chunks", "/a/link",
		"/missing", "/a/missing", "/a/b/small.txt/x", "/a/link/x", "/a/missing/x", "relative", "/a/../b", "/a/b\x00",
	} {
		checkFastMatchesTx(t, v, p)
	}
	// A vault that does not exist.
	nv := v.s.Vault("default", "nope")
	if _, _, err := nv.ReadFile(ctx, "/a"); !errors.Is(err, ErrVaultNotFound) {
		t.Errorf("ReadFile in a missing vault: %v", err)
	}
	if _, err := nv.Stat(ctx, "/a"); !errors.Is(err, ErrVaultNotFound) {
		t.Errorf("Stat in a missing vault: %v", err)
	}
}

// TestDeepPaths walks paths around maxJoinWalk, where walks switch from
// joins to the recursive query.
func TestDeepPaths(t *testing.T) {
	ctx := context.Background()
	s, v := newTestVault(t)
	for _, depth := range []int{maxJoinWalk - 1, maxJoinWalk, maxJoinWalk + 1, maxJoinWalk + 9} {
		dir := "/" + strings.Repeat(fmt.Sprintf("d%d/", depth), depth-1)
		dir = strings.TrimSuffix(dir, "/")
		p := dir + "/f"
		want := []byte(p)
		if _, err := v.WriteFile(ctx, p, want, WriteOptions{Parents: true}, Meta{}); err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		checkFastMatchesTx(t, v, p)
		checkFastMatchesTx(t, v, dir)
		checkFastMatchesTx(t, v, p+"/x")
		checkFastMatchesTx(t, v, dir+"/missing")
		checkFastMatchesTx(t, v, dir+"/missing/x")
		// Copy-on-write along the whole chain after a checkpoint.
		cp := fmt.Sprintf("cp%d", depth)
		if _, err := v.SaveCheckpoint(ctx, cp, "", false, Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.WriteFile(ctx, p, []byte("changed"), WriteOptions{}, Meta{}); err != nil {
			t.Fatalf("depth %d: rewrite: %v", depth, err)
		}
		if err := v.Mkdir(ctx, dir+"/sub", 0o700, false, Meta{}); err != nil {
			t.Fatalf("depth %d: mkdir: %v", depth, err)
		}
		if err := v.Rename(ctx, p, dir+"/sub/g", RenameOptions{}, Meta{}); err != nil {
			t.Fatalf("depth %d: rename: %v", depth, err)
		}
		got, _, err := v.ReadFile(ctx, dir+"/sub/g")
		if err != nil || string(got) != "changed" {
			t.Fatalf("depth %d: read after rename: %q, %v", depth, got, err)
		}
		ch, err := v.Diff(ctx, cp, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Added) != 2 || len(ch.Deleted) != 1 || len(ch.Modified) != 0 ||
			ch.Added[0].Path != dir+"/sub" || ch.Added[1].Path != dir+"/sub/g" || ch.Deleted[0].Path != p {
			t.Fatalf("depth %d: diff = %+v", depth, ch)
		}
		if _, err := v.RestoreCheckpoint(ctx, cp, Meta{}); err != nil {
			t.Fatal(err)
		}
		got, _, err = v.ReadFile(ctx, p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("depth %d: read after restore: %q, %v", depth, got, err)
		}
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLargeFileLazyList changes a file whose chunk list path walks leave
// in the database (over 2 MiB) in every way a file can change, and checks
// its content against a copy in memory after each step.
func TestLargeFileLazyList(t *testing.T) {
	ctx := context.Background()
	s, v := newTestVault(t)
	const p = "/big.bin"
	want := content(7, 3<<20+123)
	if _, err := v.WriteFile(ctx, p, want, WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	check := func(step string) {
		t.Helper()
		got, e, err := v.ReadFile(ctx, p)
		if err != nil || !bytes.Equal(got, want) || e.Size != int64(len(want)) {
			t.Fatalf("%s: read %d bytes (size %d), %v; want %d bytes", step, len(got), e.Size, err, len(want))
		}
		buf := make([]byte, 10000)
		off := int64(len(want)) / 3
		n, err := v.ReadAt(ctx, p, off, buf)
		if err != nil || !bytes.Equal(buf[:n], want[off:min(off+int64(len(buf)), int64(len(want)))]) {
			t.Fatalf("%s: ReadAt: %d, %v", step, n, err)
		}
	}
	writeAt := func(step string, off int64, data []byte) {
		t.Helper()
		if _, err := v.WriteAt(ctx, p, off, data, Meta{}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if end := off + int64(len(data)); end > int64(len(want)) {
			want = append(want, make([]byte, end-int64(len(want)))...)
		}
		copy(want[off:], data)
		check(step)
	}
	check("written")
	writeAt("inside one chunk", 5*ChunkSize+100, content(8, 4096))
	writeAt("across chunks", 9*ChunkSize-10, content(9, 100))
	writeAt("whole chunk", 2*ChunkSize, content(10, ChunkSize))
	writeAt("same bytes again", 2*ChunkSize, content(10, ChunkSize))
	writeAt("at the end", int64(len(want))-5, content(11, 1000))
	writeAt("past the end", int64(len(want))+ChunkSize+7, content(12, 300))
	if _, err := v.SaveCheckpoint(ctx, "c", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	frozen := bytes.Clone(want)
	writeAt("after a checkpoint", 17*ChunkSize+1, content(13, 5000))
	if err := v.Truncate(ctx, p, 40*ChunkSize+3, Meta{}); err != nil {
		t.Fatal(err)
	}
	want = want[:40*ChunkSize+3]
	check("truncated")
	if _, err := v.WriteFile(ctx, p, content(14, 999), WriteOptions{Append: true}, Meta{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, content(14, 999)...)
	check("appended")
	mode := fs.FileMode(0o600)
	if _, err := v.SetAttr(ctx, p, &mode, nil, Meta{}); err != nil {
		t.Fatal(err)
	}
	check("chmod")
	if err := v.Copy(ctx, p, "/copy.bin", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := v.ReadFile(ctx, "/copy.bin"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy: %d bytes, %v", len(got), err)
	}
	ch, err := v.Diff(ctx, "c", "")
	if err != nil || len(ch.Modified) != 1 || len(ch.Added) != 1 {
		t.Fatalf("diff = %+v, %v", ch, err)
	}
	if _, err := v.RestoreCheckpoint(ctx, "c", Meta{}); err != nil {
		t.Fatal(err)
	}
	want = frozen
	check("restored")
	if err := v.Truncate(ctx, p, 0, Meta{}); err != nil {
		t.Fatal(err)
	}
	want = want[:0]
	check("emptied")
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDiffUnpackableName checks that a directory entry whose name the
// packed listing cannot carry ('/', which only a damaged or crafted
// import can store) is still diffed, row by row.
func TestDiffUnpackableName(t *testing.T) {
	ctx := context.Background()
	s, v := newTestVault(t)
	if _, err := v.WriteFile(ctx, "/d/x", []byte("x"), WriteOptions{Parents: true}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SaveCheckpoint(ctx, "c", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "/d/y", []byte("yy"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	var dir, file int64
	if err := v.View(ctx, func(tx *Tx) error {
		chain, err := tx.walk("test", "/d/y", []string{"d", "y"})
		if err != nil {
			return err
		}
		dir, file = chain[1].id, chain[2].id
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b", "1/2/3", "z/"} {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO dirents(dir, name, child) VALUES(?, ?, ?)`, dir, name, file); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := v.Diff(ctx, "c", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ch.Added {
		got = append(got, c.Path)
	}
	if want := "/d/1/2/3 /d/a/b /d/y /d/z/"; strings.Join(got, " ") != want || len(ch.Modified)+len(ch.Deleted) != 0 {
		t.Fatalf("diff added %q, %+v; want %q", got, ch, want)
	}
}

func TestUnpackListing(t *testing.T) {
	for _, c := range []struct {
		packed string
		n      int64
		ok     bool
		want   string
	}{
		{"", 0, true, ""},
		{"5/a", 1, true, "a=5"},
		{"5/b/6/a", 2, true, "a=6 b=5"},
		{"5/a/6/a", 2, false, ""},
		{"5/a/", 1, false, ""},
		{"5/a/b/6/c", 2, false, ""},
		{"5/a/6/b", 1, false, ""},
		{"x/a", 1, false, ""},
		{"5", 1, false, ""},
	} {
		l, ok := unpackListing(c.packed, c.n)
		var got []string
		for _, d := range l {
			got = append(got, fmt.Sprintf("%s=%d", d.name, d.child))
		}
		if ok != c.ok || (ok && strings.Join(got, " ") != c.want) {
			t.Errorf("unpackListing(%q, %d) = %v, %v; want %q, %v", c.packed, c.n, got, ok, c.want, c.ok)
		}
	}
}

// TestVaultRowCacheAcrossStores changes a vault through a second Store on
// the same file (another process, as far as the first can tell) between
// writes of the first, which caches vault rows between its writes.
func TestVaultRowCacheAcrossStores(t *testing.T) {
	ctx := context.Background()
	a, va := newTestVault(t)
	b, err := Open(ctx, a.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vb := b.Vault("default", "v")
	if _, err := va.WriteFile(ctx, "/f1", []byte("1"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := va.SaveCheckpoint(ctx, "c", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := va.WriteFile(ctx, "/f2", []byte("2"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	// The other store lowers the quota: a's next new file must fail.
	one := int64(2)
	if _, err := vb.SetQuota(ctx, Quota{MaxFiles: &one}, Meta{}); err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if _, err := va.WriteFile(ctx, "/f3", []byte("3"), WriteOptions{}, Meta{}); !errors.As(err, &qe) {
		t.Fatalf("write after another store set a quota: %v, want a quota error", err)
	}
	// The other store restores: a writes into the restored tree.
	if _, err := vb.SetQuota(ctx, Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := vb.RestoreCheckpoint(ctx, "c", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := va.WriteFile(ctx, "/f4", []byte("4"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := va.Stat(ctx, "/f2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("f2 after the other store restored: %v, want not found", err)
	}
	u := func(v *Vault) Usage {
		_, u, err := v.Quota(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if ua, ub := u(va), u(vb); ua != ub || ua.Files != 2 {
		t.Fatalf("usage seen by a %+v, by b %+v; want 2 entries (f1, f4)", ua, ub)
	}
	// The other store deletes the vault: a's write must not find it.
	if err := b.Delete(ctx, "default", "v", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := va.WriteFile(ctx, "/f5", []byte("5"), WriteOptions{}, Meta{}); !errors.Is(err, ErrVaultNotFound) {
		t.Fatalf("write after the other store deleted the vault: %v", err)
	}
	if err := a.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentUse runs writers and readers of several vaults on one
// Store at once: the shared statement cache, the writer connection and the
// vault row cache must hold up (run it with -race).
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	for _, name := range []string{"a", "b"} {
		if _, err := s.Create(ctx, "default", name, Quota{}, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 60
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := s.Vault("default", []string{"a", "b"}[w%2])
			for i := range rounds {
				p := fmt.Sprintf("/w%d/f%d", w, i%7)
				if _, err := v.WriteFile(ctx, p, content(i, 100+i), WriteOptions{Parents: true}, Meta{}); err != nil {
					errs <- err
					return
				}
				if i%20 == 0 {
					if _, err := v.SaveCheckpoint(ctx, fmt.Sprintf("c%d-%d", w, i), "", false, Meta{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := s.Vault("default", []string{"a", "b"}[r%2])
			for i := range rounds {
				p := fmt.Sprintf("/w%d/f%d", r, i%7)
				if _, _, err := v.ReadFile(ctx, p); err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				if _, err := v.Stat(ctx, p); err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				if _, err := v.ReadDir(ctx, "/"); err != nil {
					errs <- err
					return
				}
				if cps, err := v.Checkpoints(ctx); err != nil {
					errs <- err
					return
				} else if len(cps) > 0 {
					if _, err := v.Diff(ctx, cps[0].Name, ""); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWalkCacheFollowsChanges makes, in one transaction, the changes that
// move or replace a directory whose chain the transaction's walks have
// cached, and then walks through that directory's old and new paths: each
// walk must see the tree as it is at that point, as a fresh transaction
// does afterwards.
func TestWalkCacheFollowsChanges(t *testing.T) {
	ctx := context.Background()
	_, v := newTestVault(t)
	mustNotExist := func(err error) {
		t.Helper()
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	}
	must(t, v.Mkdir(ctx, "/a/b/c", 0o755, true, Meta{}))
	must(t, v.Mkdir(ctx, "/x/y", 0o755, true, Meta{}))
	// A checkpoint freezes the nodes: the first change of the
	// transaction below copies /a and /a/b, whose old chains must not be
	// walked from afterwards.
	if _, err := v.SaveCheckpoint(ctx, "cp", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		must2 := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		_, err := tx.WriteFile("/a/b/c/f1", []byte("1"), WriteOptions{})
		must2(err)
		_, err = tx.WriteFile("/a/b/c/f2", []byte("2"), WriteOptions{}) // from the cached chain
		must2(err)
		// Move the cached directory away: its old path is gone.
		must2(tx.Rename("/a/b", "/x/b", RenameOptions{}))
		_, err = tx.WriteFile("/a/b/c/f3", []byte("3"), WriteOptions{})
		mustNotExist(err)
		_, err = tx.WriteFile("/x/b/c/f3", []byte("3"), WriteOptions{})
		must2(err)
		// Put another directory at the old path.
		must2(tx.Rename("/x/y", "/a/b", RenameOptions{}))
		_, err = tx.Stat("/a/b/c")
		mustNotExist(err)
		_, err = tx.WriteFile("/a/b/f4", []byte("4"), WriteOptions{})
		must2(err)
		// Replace a walked directory with a file.
		must2(tx.Remove("/x/b", RemoveOptions{Recursive: true}))
		_, err = tx.WriteFile("/x/b", []byte("file"), WriteOptions{})
		must2(err)
		_, err = tx.WriteFile("/x/b/c/f5", []byte("5"), WriteOptions{})
		if !errors.Is(err, ErrNotDir) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("write under a file: %v", err)
		}
		// A hard link's name in a cached directory, then its removal.
		must2(tx.Link("/a/b/f4", "/a/b/f6"))
		must2(tx.Remove("/a/b/f4", RemoveOptions{}))
		data, _, err := tx.ReadFile("/a/b/f6")
		must2(err)
		if string(data) != "4" {
			t.Fatalf("/a/b/f6 = %q", data)
		}
		return nil
	}))
	var got []string
	var list func(tx *Tx, p string) error
	list = func(tx *Tx, p string) error {
		es, err := tx.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range es {
			got = append(got, fmt.Sprintf("%s %v", e.Path, e.Kind))
			if e.Kind == KindDir {
				if err := list(tx, e.Path); err != nil {
					return err
				}
			}
		}
		return nil
	}
	must(t, v.View(ctx, func(tx *Tx) error { return list(tx, "/") }))
	want := []string{"/a dir", "/a/b dir", "/a/b/f6 file", "/x dir", "/x/b file"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tree after the transaction:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAuditOfABurst: a transaction of many changes (the mount's queued
// bursts) records one audit event per change, in order, with its details,
// whether its events go in 32 rows to a statement or one by one.
func TestAuditOfABurst(t *testing.T) {
	ctx := context.Background()
	_, v := newTestVault(t)
	for _, n := range []int{1, 31, 32, 33, 70} {
		start, err := v.Audit(ctx, AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		after := int64(0)
		if len(start) > 0 {
			after = start[len(start)-1].ID
		}
		meta := Meta{Actor: fmt.Sprint("burst", n)}
		if err := v.Update(ctx, meta, func(tx *Tx) error {
			for i := range n {
				p := fmt.Sprintf("/b%d/f%02d", n, i)
				if _, err := tx.WriteFile(p, []byte("x"), WriteOptions{Parents: true}); err != nil {
					return err
				}
				if i%2 == 1 {
					if err := tx.Rename(p, p+".r", RenameOptions{}); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		evs, err := v.Audit(ctx, AuditFilter{AfterID: after})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Actor != meta.Actor {
				t.Fatalf("burst of %d: event %+v has actor %q", n, e, e.Actor)
			}
			got = append(got, e.Action+" "+e.Path+fmt.Sprint(e.Details["to"]))
		}
		var want []string
		for i := range n {
			p := fmt.Sprintf("/b%d/f%02d", n, i)
			want = append(want, "file.write "+p+"<nil>")
			if i%2 == 1 {
				want = append(want, "rename "+p+p+".r")
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("burst of %d: audit\n%s\nwant\n%s", n, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
