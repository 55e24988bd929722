package vault

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// paths lists the paths of changes.
func paths(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

func TestHardLinks(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/d/a", []byte("one"))
	mustWrite(t, v, "/e/keep", []byte("k"))
	must(t, v.Mkdir(ctx, "/other", 0o755, false, Meta{}))
	before, err := v.Info(ctx)
	must(t, err)

	// Errors first: nothing changes.
	for _, c := range []struct {
		old, new string
		want     error
	}{
		{"/d", "/x", ErrPermission},
		{"/missing", "/x", ErrNotFound},
		{"/d/a", "/e/keep", ErrExists},
		{"/d/a", "/nodir/x", ErrNotFound},
		{"/d/a", "/d/a/x", ErrNotDir},
	} {
		if err := v.Link(ctx, c.old, c.new, Meta{}); !errors.Is(err, c.want) {
			t.Errorf("link %s %s: %v, want %v", c.old, c.new, err, c.want)
		}
	}

	must(t, v.Link(ctx, "/d/a", "/e/b", Meta{}))
	must(t, v.Link(ctx, "/e/b", "/c", Meta{})) // a link of a link
	ea, err := v.Stat(ctx, "/d/a")
	must(t, err)
	for _, p := range []string{"/d/a", "/e/b", "/c"} {
		e, err := v.Stat(ctx, p)
		must(t, err)
		if e.Ino != ea.Ino || e.Nlink != 3 || e.Kind != KindFile || e.Size != 3 {
			t.Fatalf("stat %s = %+v, want ino %d, 3 links", p, e, ea.Ino)
		}
	}
	list, err := v.ReadDir(ctx, "/e")
	must(t, err)
	if len(list) != 2 || list[0].Name != "b" || list[0].Ino != ea.Ino || list[0].Nlink != 3 || list[0].Kind != KindFile {
		t.Fatalf("readdir /e = %+v", list)
	}
	root, err := v.ReadDir(ctx, "/")
	must(t, err)
	var names []string
	for _, e := range root {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"c", "d", "e", "other"}) {
		t.Fatalf("root lists %q: the hidden directory shows", names)
	}
	info, err := v.Info(ctx)
	must(t, err)
	if info.Files != before.Files+2 || info.Dirs != before.Dirs {
		t.Fatalf("usage after two links: files %d dirs %d, before %d %d", info.Files, info.Dirs, before.Files, before.Dirs)
	}

	// A write through one name shows through the others.
	if _, err := v.WriteAt(ctx, "/e/b", 3, []byte("+two"), Meta{}); err != nil {
		t.Fatal(err)
	}
	mustRead(t, v, "/d/a", []byte("one+two"))
	mustRead(t, v, "/c", []byte("one+two"))
	mode := FileMode(0o600)
	_, err = v.SetAttr(ctx, "/c", &mode, nil, Meta{})
	must(t, err)
	if a := attrsOf(t, v, "/d/a"); a.mode != 0o600 {
		t.Fatalf("chmod through one name: other name's mode %o", a.mode)
	}

	// Checkpoint, then a fork whose writes leave the parent alone.
	_, err = v.SaveCheckpoint(ctx, "base", "", false, Meta{})
	must(t, err)
	_, err = s.Fork(ctx, "default", "a", "f", "", Meta{})
	must(t, err)
	f := s.Vault("default", "f")
	_, err = f.WriteFile(ctx, "/c", []byte("fork"), WriteOptions{}, Meta{})
	must(t, err)
	mustRead(t, f, "/d/a", []byte("fork"))
	mustRead(t, v, "/d/a", []byte("one+two"))
	mustRead(t, v, "/c", []byte("one+two"))

	// A change of the inode is reported under every name, even in
	// directories nothing else changed in.
	ch, err := f.Diff(ctx, "", "")
	must(t, err)
	if !ch.Empty() {
		t.Fatalf("diff of a tree with itself: %+v", ch)
	}
	ch, err = v.Diff(ctx, "base", "")
	must(t, err)
	if !ch.Empty() {
		t.Fatalf("diff right after a checkpoint: %+v", ch)
	}
	_, err = v.WriteFile(ctx, "/d/a", []byte("changed"), WriteOptions{}, Meta{})
	must(t, err)
	ch, err = v.Diff(ctx, "base", "")
	must(t, err)
	if got := paths(ch.Modified); !slices.Equal(got, []string{"/c", "/d/a", "/e/b"}) || len(ch.Added)+len(ch.Deleted) != 0 {
		t.Fatalf("diff after a write through one name: %+v", ch)
	}
	if ch.Modified[0].Type != "file" || ch.Modified[0].Size != 7 || ch.BytesRemoved != 0 || ch.BytesAdded != 0 {
		t.Fatalf("diff reports %+v", ch)
	}

	// Unlink one name: the others stay, with one link less.
	must(t, v.Remove(ctx, "/e/b", RemoveOptions{}, Meta{}))
	if e, err := v.Stat(ctx, "/c"); err != nil || e.Nlink != 2 {
		t.Fatalf("after unlink: %+v, %v", e, err)
	}
	mustRead(t, v, "/d/a", []byte("changed"))
	// Rename over a name of the same inode does nothing; over another
	// file replaces it.
	must(t, v.Rename(ctx, "/c", "/d/a", RenameOptions{}, Meta{}))
	if e, err := v.Stat(ctx, "/c"); err != nil || e.Nlink != 2 {
		t.Fatalf("rename onto its own other name: %+v, %v", e, err)
	}
	must(t, v.Rename(ctx, "/c", "/e/keep", RenameOptions{}, Meta{}))
	mustRead(t, v, "/e/keep", []byte("changed"))
	if _, err := v.Stat(ctx, "/c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat /c after rename: %v", err)
	}
	// A link renamed over a name of another inode takes a link off it.
	must(t, v.Link(ctx, "/d/a", "/other/x", Meta{}))
	mustWrite(t, v, "/new", []byte("new"))
	must(t, v.Rename(ctx, "/new", "/other/x", RenameOptions{}, Meta{}))
	if e, err := v.Stat(ctx, "/d/a"); err != nil || e.Nlink != 2 {
		t.Fatalf("after rename over one name: %+v, %v", e, err)
	}

	// Export and import keep the links; the export has no hidden paths.
	file := filepath.Join(t.TempDir(), "a.avfs")
	_, err = s.Export(ctx, "default", "a", file)
	must(t, err)
	_, err = s.Import(ctx, file, "default", "imp", Meta{})
	must(t, err)
	imp := s.Vault("default", "imp")
	_, err = imp.WriteFile(ctx, "/e/keep", []byte("imported"), WriteOptions{}, Meta{})
	must(t, err)
	mustRead(t, imp, "/d/a", []byte("imported"))
	mustRead(t, v, "/d/a", []byte("changed"))
	host := t.TempDir()
	_, err = v.ExportDir(ctx, "/", host)
	must(t, err)
	if got, _ := filepath.Glob(filepath.Join(host, "*")); len(got) != 3 {
		t.Fatalf("export to a directory wrote %q", got)
	}
	for _, p := range []string{"d/a", "e/keep"} {
		if b, err := os.ReadFile(filepath.Join(host, p)); err != nil || string(b) != "changed" {
			t.Fatalf("exported %s: %q, %v", p, b, err)
		}
	}

	// Search and find show each name, never the hidden directory.
	found, err := v.Find(ctx, "/", FindOptions{})
	must(t, err)
	var files []string
	for _, e := range found {
		if len(e.Path) > MaxNameLen {
			t.Fatalf("find shows %q", e.Path)
		}
		if e.Kind == KindFile && e.Ino == ea.Ino {
			files = append(files, e.Path)
		}
	}
	if !slices.Equal(files, []string{"/d/a", "/e/keep"}) {
		t.Fatalf("find lists the linked file as %q", files)
	}
	hits, err := v.Search(ctx, "changed", 0)
	must(t, err)
	var hitPaths []string
	for _, h := range hits {
		hitPaths = append(hitPaths, h.Path)
	}
	slices.Sort(hitPaths)
	if !slices.Equal(hitPaths, []string{"/d/a", "/e/keep"}) {
		t.Fatalf("search finds %q", hitPaths)
	}

	// Restore brings back the checkpoint's names and content.
	_, err = v.RestoreCheckpoint(ctx, "base", Meta{})
	must(t, err)
	mustRead(t, v, "/e/b", []byte("one+two"))
	if e, err := v.Stat(ctx, "/e/b"); err != nil || e.Nlink != 3 {
		t.Fatalf("after restore: %+v, %v", e, err)
	}

	// The last name takes the inode with it; GC keeps what is linked.
	for _, p := range []string{"/e/b", "/c"} {
		must(t, v.Remove(ctx, p, RemoveOptions{}, Meta{}))
	}
	_, err = s.GC(ctx)
	must(t, err)
	mustRead(t, v, "/d/a", []byte("one+two"))
	mustRead(t, f, "/e/b", []byte("fork"))
	if e, err := v.Stat(ctx, "/d/a"); err != nil || e.Nlink != 1 {
		t.Fatalf("last name: %+v, %v", e, err)
	}
	must(t, v.Remove(ctx, "/d", RemoveOptions{Recursive: true}, Meta{}))
	info, err = v.Info(ctx)
	must(t, err)
	if info.Files != 1 || info.Bytes != 1 {
		t.Fatalf("usage after removing every name: %+v", info)
	}
}

func TestRenameExchange(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/a/f", []byte("file"))
	mustWrite(t, v, "/b/sub/g", []byte("g"))
	must(t, v.Rename(ctx, "/a/f", "/b/sub", RenameOptions{Exchange: true}, Meta{}))
	mustRead(t, v, "/b/sub", []byte("file"))
	mustRead(t, v, "/a/f/g", []byte("g"))
	if e, err := v.Stat(ctx, "/a"); err != nil || e.Nlink != 3 {
		t.Fatalf("/a after exchange: %+v, %v", e, err)
	}
	if e, err := v.Stat(ctx, "/b"); err != nil || e.Nlink != 2 {
		t.Fatalf("/b after exchange: %+v, %v", e, err)
	}
	for _, c := range []struct {
		a, b string
		want error
	}{
		{"/a/f", "/missing", ErrNotFound},
		{"/a", "/a/f/g", ErrInvalidArgument},
		{"/a/f/g", "/a", ErrInvalidArgument},
	} {
		if err := v.Rename(ctx, c.a, c.b, RenameOptions{Exchange: true}, Meta{}); !errors.Is(err, c.want) {
			t.Errorf("exchange %s %s: %v, want %v", c.a, c.b, err, c.want)
		}
	}
}

// stubAt reports whether path p of v is a hard-link stub (the inode lives
// in the hidden directory) and whether the hidden directory holds ino.
func stubAt(t *testing.T, v *Vault, p string, ino uint64) (stub, hidden bool) {
	t.Helper()
	type st struct{ stub, hidden bool }
	r, err := read(context.Background(), v.s, v.namespace, v.name, func(tx *Tx) (st, error) {
		comps, err := CleanPath(p)
		if err != nil {
			return st{}, err
		}
		chain, err := tx.walk("test", p, comps)
		if err != nil {
			return st{}, err
		}
		var out st
		out.stub = chain[len(chain)-1].kind == kindLink
		all, err := tx.walkPrefix([]string{linksName, strconv.FormatUint(ino, 10)})
		if err != nil {
			return st{}, err
		}
		out.hidden = len(all) == 3
		return out, nil
	})
	must(t, err)
	return r.stub, r.hidden
}

// TestInodeMovesBackAtOneName: git's link(tmp, final) + unlink(tmp) leaves
// final an ordinary file again, with the same inode number, content and
// attributes, nothing in the change summary, and checkpoints and forks
// made while it had two names keep them.
func TestInodeMovesBackAtOneName(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/objects/tmp_obj", []byte("blob"))
	mode := fs.FileMode(0o444)
	_, err := v.SetAttr(ctx, "/objects/tmp_obj", &mode, nil, Meta{})
	must(t, err)
	before, err := v.Stat(ctx, "/objects/tmp_obj")
	must(t, err)
	must(t, v.Mkdir(ctx, "/objects/ab", 0o755, false, Meta{}))
	must(t, v.Link(ctx, "/objects/tmp_obj", "/objects/ab/cdef", Meta{}))
	_, err = v.SaveCheckpoint(ctx, "two-names", "", false, Meta{})
	must(t, err)
	_, err = s.Fork(ctx, "default", "a", "f", "", Meta{})
	must(t, err)
	moved := s.hints.count()
	must(t, v.Remove(ctx, "/objects/tmp_obj", RemoveOptions{}, Meta{}))
	if s.hints.count() != moved+1 {
		t.Fatalf("inodes moved back: %d, want %d", s.hints.count(), moved+1)
	}
	if stub, hidden := stubAt(t, v, "/objects/ab/cdef", before.Ino); stub || hidden {
		t.Fatalf("after the unlink: stub %v, in the hidden directory %v; want an ordinary file", stub, hidden)
	}
	e, err := v.Stat(ctx, "/objects/ab/cdef")
	must(t, err)
	if e.Ino != before.Ino || e.Nlink != 1 || e.Mode != before.Mode || e.Size != 4 {
		t.Fatalf("stat after the move back = %+v, want ino %d, 1 link, mode %v", e, before.Ino, before.Mode)
	}
	mustRead(t, v, "/objects/ab/cdef", []byte("blob"))
	ch, err := v.Diff(ctx, "two-names", "")
	must(t, err)
	if len(ch.Added) != 0 || len(ch.Modified) != 0 || !slices.Equal(paths(ch.Deleted), []string{"/objects/tmp_obj"}) {
		t.Fatalf("changes since two names: added %v modified %v deleted %v, want only /objects/tmp_obj deleted",
			paths(ch.Added), paths(ch.Modified), paths(ch.Deleted))
	}
	// A merge from the fork (made while both names existed) brings its
	// own change and leaves the moved-back file as it is.
	fv := s.Vault("default", "f")
	mustWrite(t, fv, "/from-fork", []byte("f"))
	if _, err := v.Merge(ctx, "f", MergeOptions{}, Meta{}); err != nil {
		t.Fatalf("merge of the fork after the move back: %v", err)
	}
	mustRead(t, v, "/from-fork", []byte("f"))
	if e, err := v.Stat(ctx, "/objects/ab/cdef"); err != nil || e.Ino != before.Ino || e.Nlink != 1 {
		t.Fatalf("after the merge: %+v %v, want ino %d with 1 link", e, err, before.Ino)
	}
	if _, err := v.Stat(ctx, "/objects/tmp_obj"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("merge brought back the unlinked name: %v", err)
	}
	// Writes after the move go to the one node.
	mustWrite(t, v, "/objects/ab/cdef", []byte("changed"))
	// The fork and the checkpoint still have both names, one inode.
	mustRead(t, fv, "/objects/tmp_obj", []byte("blob"))
	mustWrite(t, fv, "/objects/tmp_obj", []byte("fork"))
	mustRead(t, fv, "/objects/ab/cdef", []byte("fork"))
	_, err = v.RestoreCheckpoint(ctx, "two-names", Meta{})
	must(t, err)
	for _, p := range []string{"/objects/tmp_obj", "/objects/ab/cdef"} {
		e, err := v.Stat(ctx, p)
		must(t, err)
		if e.Ino != before.Ino || e.Nlink != 2 {
			t.Fatalf("restored %s = %+v, want ino %d with 2 links", p, e, before.Ino)
		}
		mustRead(t, v, p, []byte("blob"))
	}
	must(t, v.Remove(ctx, "/objects/ab/cdef", RemoveOptions{}, Meta{}))
	if stub, _ := stubAt(t, v, "/objects/tmp_obj", before.Ino); stub {
		t.Fatalf("/objects/tmp_obj is still a stub after its other name went")
	}
	// Export and import carry the moved-back file, inode number included.
	file := filepath.Join(t.TempDir(), "a.avfs")
	_, err = s.Export(ctx, "default", "a", file)
	must(t, err)
	_, err = s.Import(ctx, file, "default", "b", Meta{})
	must(t, err)
	vb := s.Vault("default", "b")
	mustRead(t, vb, "/objects/tmp_obj", []byte("blob"))
	if e, err := vb.Stat(ctx, "/objects/tmp_obj"); err != nil || e.Ino != before.Ino || e.Nlink != 1 {
		t.Fatalf("imported: %+v %v, want ino %d with 1 link", e, err, before.Ino)
	}
	must(t, s.IntegrityCheck(ctx))
}

// TestInodeMovesBackAfterLookup: a store that did not see the links made
// (another process) cannot know the last name at the unlink; the first
// lookup that finds it does, and the next write moves it back.
func TestInodeMovesBackAfterLookup(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	a, err := Open(ctx, path, Options{})
	must(t, err)
	defer a.Close()
	va := newVault(t, a, "v", Quota{})
	mustWrite(t, va, "/x", []byte("data"))
	must(t, va.Link(ctx, "/x", "/y", Meta{}))
	b, err := Open(ctx, path, Options{})
	must(t, err)
	defer b.Close()
	vb := b.Vault("default", "v")
	must(t, vb.Remove(ctx, "/x", RemoveOptions{}, Meta{}))
	e, err := vb.Stat(ctx, "/y")
	must(t, err)
	if stub, _ := stubAt(t, vb, "/y", e.Ino); !stub {
		t.Fatalf("/y moved back without a hint: want it still a stub until a lookup")
	}
	mustWrite(t, vb, "/z", []byte("any write"))
	if stub, hidden := stubAt(t, vb, "/y", e.Ino); stub || hidden {
		t.Fatalf("/y after a lookup and a write: stub %v hidden %v, want an ordinary file", stub, hidden)
	}
	e2, err := va.Stat(ctx, "/y")
	must(t, err)
	if e2.Ino != e.Ino || e2.Nlink != 1 {
		t.Fatalf("stat /y = %+v, want ino %d, 1 link", e2, e.Ino)
	}
	mustRead(t, va, "/y", []byte("data"))
}

// BenchmarkStatAfterLink is the cost of a stat of a file that was
// hard-linked (decisions §29): "plain" was never linked, "one-name-left"
// had a second name that git's link-then-unlink removed (moved back out of
// the hidden directory: the same as plain), "two-names" still has both (a
// stub: one more lookup, and no one-statement path).
func BenchmarkStatAfterLink(b *testing.B) {
	ctx := context.Background()
	s := openTestStore(b)
	v := newVault(b, s, "a", Quota{})
	mustWrite(b, v, "/d/plain", []byte("x"))
	mustWrite(b, v, "/d/tmp", []byte("x"))
	must(b, v.Link(ctx, "/d/tmp", "/d/one-name-left", Meta{}))
	must(b, v.Remove(ctx, "/d/tmp", RemoveOptions{}, Meta{}))
	mustWrite(b, v, "/d/two-names", []byte("x"))
	must(b, v.Link(ctx, "/d/two-names", "/d/other", Meta{}))
	for _, name := range []string{"plain", "one-name-left", "two-names"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := v.Stat(ctx, "/d/"+name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Rename with Ctime leaves what link(2) and unlink(2) of the old name
// leave: the moved entry's change time is the rename's, on a frozen node
// too (a checkpoint keeps the old one), and on a hard-linked inode, whose
// other names show it.
func TestRenameCtime(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	mustWrite(t, v, "/d/a", []byte("one"))
	mustWrite(t, v, "/d/b", []byte("two"))
	before, err := v.Stat(ctx, "/d/a")
	must(t, err)
	_, err = v.SaveCheckpoint(ctx, "c1", "", false, Meta{})
	must(t, err)
	at := before.Ctime.Add(time.Hour)
	rename := func(src, dst string, o RenameOptions, at time.Time) {
		t.Helper()
		must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
			return tx.AtTime(at, func() error { return tx.Rename(src, dst, o) })
		}))
	}
	rename("/d/a", "/d/x", RenameOptions{NoReplace: true, Ctime: true}, at)
	rename("/d/b", "/d/y", RenameOptions{NoReplace: true}, at)
	x, err := v.Stat(ctx, "/d/x")
	must(t, err)
	if !x.Ctime.Equal(at) || !x.Mtime.Equal(before.Mtime) || x.Ino != before.Ino || x.Nlink != 1 {
		t.Errorf("after rename with Ctime: %+v, want ctime %v, mtime %v, ino %d", x, at, before.Mtime, before.Ino)
	}
	mustRead(t, v, "/d/x", []byte("one"))
	y, err := v.Stat(ctx, "/d/y")
	must(t, err)
	if y.Ctime.Equal(at) {
		t.Errorf("rename without Ctime changed the change time")
	}
	d, err := v.Stat(ctx, "/d")
	must(t, err)
	if !d.Mtime.Equal(at) || !d.Ctime.Equal(at) {
		t.Errorf("directory after the renames: %+v, want mtime and ctime %v", d, at)
	}
	// A hard-linked inode: its other name shows the new change time.
	must(t, v.Link(ctx, "/d/x", "/d/l", Meta{}))
	at2 := at.Add(time.Hour)
	rename("/d/x", "/d/z", RenameOptions{NoReplace: true, Ctime: true}, at2)
	for _, p := range []string{"/d/z", "/d/l"} {
		e, err := v.Stat(ctx, p)
		must(t, err)
		if !e.Ctime.Equal(at2) || e.Nlink != 2 || e.Ino != before.Ino {
			t.Errorf("%s after rename with Ctime of a linked name: %+v, want ctime %v, 2 links", p, e, at2)
		}
	}
	// The checkpoint kept the frozen node as it was.
	_, err = v.RestoreCheckpoint(ctx, "c1", Meta{})
	must(t, err)
	a, err := v.Stat(ctx, "/d/a")
	must(t, err)
	if !a.Ctime.Equal(before.Ctime) {
		t.Errorf("restored /d/a: ctime %v, want %v", a.Ctime, before.Ctime)
	}
}
