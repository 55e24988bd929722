package tree

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// This file drives a Tree over a real vault, without any kernel, with
// random sequences of what a file system is asked (create, open, write,
// truncate, rename, link, unlink, mkdir, rmdir, close, sync) and of
// changes made behind its back through the vault API (then Refresh), and
// compares it with a simple in-memory model: names to inode ids, inode
// ids to content. After every few steps the tree's own view (lookups,
// attributes, reads) must match the model, and after Sync so must the
// vault's.

// minode is one inode of the model.
type minode struct {
	dir  bool
	data []byte
}

// model maps each path ("/a/b") to an inode id; "/" is inode 0.
type model struct {
	names  map[string]int
	inodes map[int]*minode
	nextID int
}

func newModel() *model {
	return &model{names: map[string]int{"/": 0}, inodes: map[int]*minode{0: {dir: true}}, nextID: 1}
}

func (m *model) isDir(p string) bool {
	id, ok := m.names[p]
	return ok && m.inodes[id].dir
}

func (m *model) hasChildren(p string) bool {
	for q := range m.names {
		if q != p && strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// links counts the names of inode id.
func (m *model) links(id int) int {
	n := 0
	for _, i := range m.names {
		if i == id {
			n++
		}
	}
	return n
}

// paths lists the model's paths of one kind, sorted.
func (m *model) paths(dirs bool) []string {
	var out []string
	for p, id := range m.names {
		if m.inodes[id].dir == dirs {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// rename moves src and everything below it to dst.
func (m *model) rename(src, dst string) {
	if old, ok := m.names[dst]; ok && m.inodes[old].dir {
		delete(m.names, dst)
	}
	moved := map[string]int{}
	for p, id := range m.names {
		if p == src || strings.HasPrefix(p, src+"/") {
			moved[dst+strings.TrimPrefix(p, src)] = id
			delete(m.names, p)
		}
	}
	for p, id := range moved {
		m.names[p] = id
	}
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// openFile is a File the test holds open, with its model inode.
type openFile struct {
	f  *File
	id int
}

type treeState struct {
	ctx  context.Context
	v    *vault.Vault
	tr   *Tree
	m    *model
	open []openFile
}

// resolve finds p in the tree by lookups from the root.
func (st *treeState) resolve(t *rapid.T, p string) *Entry {
	e := st.tr.Root()
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		c, errno := st.tr.Lookup(st.ctx, e, name)
		if errno != 0 {
			t.Fatalf("lookup %s (%s): %v", name, p, errno)
		}
		e = c
	}
	return e
}

// splitPath is p's directory and name.
func splitPath(p string) (string, string) {
	dir, name := filepath.Split(p)
	if dir != "/" {
		dir = strings.TrimSuffix(dir, "/")
	}
	return dir, name
}

func checkErrno(t *rapid.T, what string, got, want syscall.Errno) {
	if got != want {
		t.Fatalf("%s: got errno %v (%d), want %v (%d)", what, got, got, want, want)
	}
}

// readAll reads e through a File of its own.
func (st *treeState) readAll(t *rapid.T, e *Entry, size int) []byte {
	f, _, errno := st.tr.Open(st.ctx, e, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatalf("open for read: %v", errno)
	}
	defer st.tr.Release(st.ctx, f)
	return st.readFile(t, f, size)
}

func (st *treeState) readFile(t *rapid.T, f *File, size int) []byte {
	buf := make([]byte, size+10)
	n, errno := st.tr.Read(st.ctx, f, buf, 0)
	if errno != 0 {
		t.Fatalf("read: %v", errno)
	}
	return buf[:n]
}

// checkTree compares what the tree answers with the model.
func (st *treeState) checkTree(t *rapid.T) {
	for p, id := range st.m.names {
		e := st.resolve(t, p)
		in := st.m.inodes[id]
		a := st.tr.Stat(e)
		if in.dir {
			if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				t.Fatalf("tree %s: mode %o, want a directory", p, a.Mode)
			}
			_, list, errno := st.tr.List(st.ctx, e)
			if errno != 0 {
				t.Fatalf("tree list %s: %v", p, errno)
			}
			var got, want []string
			for _, d := range list {
				got = append(got, d.Name)
			}
			for q := range st.m.names {
				if d, n := splitPath(q); q != "/" && d == p {
					want = append(want, n)
				}
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("tree list %s: got %q, want %q", p, got, want)
			}
			continue
		}
		if a.Size != uint64(len(in.data)) {
			t.Fatalf("tree %s: size %d, want %d", p, a.Size, len(in.data))
		}
		if n := st.m.links(id); int(a.Nlink) != n {
			t.Fatalf("tree %s: nlink %d, want %d", p, a.Nlink, n)
		}
		if got := st.readAll(t, e, len(in.data)); !bytes.Equal(got, in.data) {
			t.Fatalf("tree %s: read %d bytes %q, want %d bytes %q", p, len(got), clip(got), len(in.data), clip(in.data))
		}
	}
	for _, o := range st.open {
		want := st.m.inodes[o.id].data
		if got := st.readFile(t, o.f, len(want)); !bytes.Equal(got, want) {
			t.Fatalf("tree: open file reads %d bytes %q, want %d bytes %q", len(got), clip(got), len(want), clip(want))
		}
	}
}

// checkVault syncs the tree and compares the vault with the model.
func (st *treeState) checkVault(t *rapid.T) {
	if err := st.tr.Sync(st.ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		list, err := st.v.ReadDir(st.ctx, dir)
		if err != nil {
			t.Fatalf("vault ReadDir %s: %v", dir, err)
		}
		for _, e := range list {
			p := join(dir, e.Name)
			seen[p] = true
			id, ok := st.m.names[p]
			if !ok {
				t.Fatalf("vault has %s, the model does not", p)
			}
			in := st.m.inodes[id]
			if in.dir != (e.Kind == vault.KindDir) {
				t.Fatalf("vault %s: kind %s, model dir %v", p, e.Kind, in.dir)
			}
			if in.dir {
				walk(p)
				continue
			}
			data, _, err := st.v.ReadFile(st.ctx, p)
			if err != nil {
				t.Fatalf("vault ReadFile %s: %v", p, err)
			}
			if !bytes.Equal(data, in.data) {
				t.Fatalf("vault %s: %d bytes %q, want %d bytes %q", p, len(data), clip(data), len(in.data), clip(in.data))
			}
			if int(e.Nlink) != st.m.links(id) {
				t.Fatalf("vault %s: nlink %d, want %d", p, e.Nlink, st.m.links(id))
			}
		}
	}
	walk("/")
	for p := range st.m.names {
		if p != "/" && !seen[p] {
			t.Fatalf("the model has %s, the vault does not", p)
		}
	}
}

func clip(b []byte) []byte { return b[:min(len(b), 12)] }

var names = []string{"a", "b", "c", "d"}

// pickPath draws an existing path of the model, a directory if dirs.
func (st *treeState) pickPath(t *rapid.T, dirs bool, label string) (string, bool) {
	ps := st.m.paths(dirs)
	if len(ps) == 0 {
		return "", false
	}
	return rapid.SampledFrom(ps).Draw(t, label), true
}

func genData(t *rapid.T, label string) []byte {
	n := rapid.SampledFrom([]int{0, 1, 7, 100, 4096, 70000}).Draw(t, label+"-len")
	seed := byte(rapid.IntRange(1, 250).Draw(t, label+"-seed"))
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

var modelStores atomic.Int64

func TestModel(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		path := filepath.Join(dir, fmt.Sprintf("store-%d.db", modelStores.Add(1)))
		s, err := vault.Open(ctx, path, vault.Options{Synchronous: "OFF"})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() {
			s.Close()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(path + suffix)
			}
		}()
		if _, err := s.Create(ctx, "default", "v", vault.Quota{}, vault.Meta{}); err != nil {
			rt.Fatal(err)
		}
		v := s.Vault("default", "v")
		tr, err := New(ctx, v, Options{
			Poll:        -1, // the test refreshes when it changes the vault
			QueueCloses: rapid.Bool().Draw(rt, "queue-closes"),
			MaxDirty:    rapid.SampledFrom([]int64{0, 5000}).Draw(rt, "max-dirty"),
			CacheBytes:  rapid.SampledFrom([]int64{0, -1}).Draw(rt, "cache"),
		})
		if err != nil {
			rt.Fatal(err)
		}
		st := &treeState{ctx: ctx, v: v, tr: tr, m: newModel()}
		defer func() {
			for _, o := range st.open {
				tr.Release(ctx, o.f)
			}
			if err := tr.Close(); err != nil {
				rt.Errorf("Close: %v", err)
			}
		}()
		st.steps(rt)
		st.checkTree(rt)
		st.checkVault(rt)
	})
}

func (st *treeState) steps(rt *rapid.T) {
	ctx, tr, m := st.ctx, st.tr, st.m
	step := 0
	create := func(t *rapid.T, dir bool) {
		d, _ := st.pickPath(t, true, "dir")
		name := rapid.SampledFrom(names).Draw(t, "name")
		p := join(d, name)
		kind := vault.KindFile
		if dir {
			kind = vault.KindDir
		}
		_, errno := tr.Create(ctx, st.resolve(t, d).Ino(), name, Spec{Kind: kind, Perm: 0o755})
		want := syscall.Errno(0)
		if _, ok := m.names[p]; ok {
			want = syscall.EEXIST
		}
		checkErrno(t, "create "+p, errno, want)
		if want == 0 {
			m.names[p] = m.nextID
			m.inodes[m.nextID] = &minode{dir: dir}
			m.nextID++
		}
	}
	rt.Repeat(map[string]func(*rapid.T){
		"": func(t *rapid.T) {
			step++
			if step%4 == 0 {
				st.checkTree(t)
			}
			if step%9 == 0 {
				st.checkVault(t)
			}
		},
		"create": func(t *rapid.T) { create(t, false) },
		"mkdir":  func(t *rapid.T) { create(t, true) },
		"open": func(t *rapid.T) {
			p, ok := st.pickPath(t, false, "file")
			if !ok || len(st.open) >= 4 {
				t.Skip("nothing to open")
			}
			flags := uint32(syscall.O_RDWR)
			trunc := rapid.IntRange(0, 3).Draw(t, "trunc") == 0
			if trunc {
				flags |= syscall.O_TRUNC
			}
			f, _, errno := tr.Open(ctx, st.resolve(t, p), flags)
			checkErrno(t, "open "+p, errno, 0)
			id := m.names[p]
			if trunc {
				m.inodes[id].data = nil
			}
			st.open = append(st.open, openFile{f: f, id: id})
		},
		"write": func(t *rapid.T) {
			if len(st.open) == 0 {
				t.Skip("nothing open")
			}
			o := rapid.SampledFrom(st.open).Draw(t, "file")
			in := m.inodes[o.id]
			off := rapid.SampledFrom([]int{0, len(in.data), len(in.data) / 2, len(in.data) + 5000}).Draw(t, "off")
			data := genData(t, "data")
			if len(data) == 0 {
				t.Skip("the kernel sends no empty write")
			}
			checkErrno(t, "write", tr.Write(ctx, o.f, data, int64(off)), 0)
			if end := off + len(data); end > len(in.data) {
				in.data = append(in.data, make([]byte, end-len(in.data))...)
			}
			copy(in.data[off:], data)
		},
		"truncate": func(t *rapid.T) {
			size := rapid.SampledFrom([]int{0, 3, 5000, 80000}).Draw(t, "size")
			s := int64(size)
			var id int
			if len(st.open) > 0 && rapid.Bool().Draw(t, "by-file") {
				o := rapid.SampledFrom(st.open).Draw(t, "file")
				var a Attr
				checkErrno(t, "ftruncate", tr.SetAttr(ctx, o.f.Entry(), false, &s, vault.Attrs{}, &a), 0)
				id = o.id
			} else {
				p, ok := st.pickPath(t, false, "file")
				if !ok {
					t.Skip("no file")
				}
				var a Attr
				checkErrno(t, "truncate "+p, tr.SetAttr(ctx, st.resolve(t, p), true, &s, vault.Attrs{}, &a), 0)
				id = m.names[p]
			}
			in := m.inodes[id]
			if size <= len(in.data) {
				in.data = in.data[:size:size]
			} else {
				in.data = append(in.data, make([]byte, size-len(in.data))...)
			}
		},
		"close": func(t *rapid.T) {
			if len(st.open) == 0 {
				t.Skip("nothing open")
			}
			i := rapid.IntRange(0, len(st.open)-1).Draw(t, "file")
			o := st.open[i]
			checkErrno(t, "flush", tr.Flush(ctx, o.f), 0)
			tr.Release(ctx, o.f)
			st.open = append(st.open[:i], st.open[i+1:]...)
		},
		"fsync": func(t *rapid.T) {
			if len(st.open) == 0 {
				t.Skip("nothing open")
			}
			checkErrno(t, "fsync", tr.Fsync(ctx, rapid.SampledFrom(st.open).Draw(t, "file").f), 0)
		},
		"rename": func(t *rapid.T) {
			src, ok := st.pickPath(t, rapid.Bool().Draw(t, "src-dir"), "src")
			if !ok || src == "/" {
				t.Skip("nothing to rename")
			}
			dd, _ := st.pickPath(t, true, "dst-dir")
			name := rapid.SampledFrom(names).Draw(t, "name")
			dst := join(dd, name)
			noReplace := rapid.IntRange(0, 4).Draw(t, "noreplace") == 0
			srcID, srcDir := m.names[src], m.isDir(src)
			victim, exists := m.names[dst]
			if noReplace && exists && victim == srcID {
				t.Skip("the kernel answers EEXIST itself")
			}
			want := syscall.Errno(0)
			switch {
			case exists && victim == srcID:
			case exists && noReplace:
				want = syscall.EEXIST
			case exists && m.inodes[victim].dir && !srcDir:
				want = syscall.EISDIR
			case exists && !m.inodes[victim].dir && srcDir:
				want = syscall.ENOTDIR
			case srcDir && (dd == src || strings.HasPrefix(dd, src+"/")):
				want = syscall.EINVAL
			case exists && m.inodes[victim].dir && m.hasChildren(dst):
				want = syscall.ENOTEMPTY
			}
			var flags uint32
			if noReplace {
				flags = unix.RENAME_NOREPLACE
			}
			sd, sn := splitPath(src)
			errno := tr.Rename(ctx, st.resolve(t, sd).Ino(), sn, st.resolve(t, dd).Ino(), name, flags)
			checkErrno(t, fmt.Sprintf("rename %s %s", src, dst), errno, want)
			if want == 0 && !(exists && victim == srcID) {
				m.rename(src, dst)
			}
		},
		"link": func(t *rapid.T) {
			src, ok := st.pickPath(t, false, "src")
			if !ok {
				t.Skip("no file")
			}
			dd, _ := st.pickPath(t, true, "dst-dir")
			name := rapid.SampledFrom(names).Draw(t, "name")
			dst := join(dd, name)
			want := syscall.Errno(0)
			if _, ok := m.names[dst]; ok {
				want = syscall.EEXIST
			}
			_, errno := tr.Link(ctx, st.resolve(t, src).Ino(), st.resolve(t, dd).Ino(), name)
			checkErrno(t, fmt.Sprintf("link %s %s", src, dst), errno, want)
			if want == 0 {
				m.names[dst] = m.names[src]
			}
		},
		"unlink": func(t *rapid.T) {
			p, ok := st.pickPath(t, rapid.IntRange(0, 4).Draw(t, "dir") == 0, "path")
			if !ok || p == "/" {
				t.Skip("nothing to remove")
			}
			want := syscall.Errno(0)
			if m.isDir(p) {
				want = syscall.EISDIR
			}
			d, n := splitPath(p)
			checkErrno(t, "unlink "+p, tr.Remove(ctx, st.resolve(t, d).Ino(), n, false), want)
			if want == 0 {
				delete(m.names, p)
			}
		},
		"rmdir": func(t *rapid.T) {
			p, ok := st.pickPath(t, rapid.IntRange(0, 4).Draw(t, "file") != 0, "path")
			if !ok || p == "/" {
				t.Skip("nothing to remove")
			}
			want := syscall.Errno(0)
			switch {
			case !m.isDir(p):
				want = syscall.ENOTDIR
			case m.hasChildren(p):
				want = syscall.ENOTEMPTY
			}
			d, n := splitPath(p)
			checkErrno(t, "rmdir "+p, tr.Remove(ctx, st.resolve(t, d).Ino(), n, true), want)
			if want == 0 {
				delete(m.names, p)
			}
		},
		"sync": func(t *rapid.T) {
			if err := tr.Sync(ctx); err != nil {
				t.Fatalf("sync: %v", err)
			}
		},
		// Another writer changes the vault; the tree catches up.
		"refresh": func(t *rapid.T) {
			if err := tr.Sync(ctx); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if p, ok := st.pickPath(t, false, "file"); ok && rapid.Bool().Draw(t, "remove") {
				for _, o := range st.open {
					if o.id == m.names[p] && m.links(o.id) == 1 {
						// An open file removed elsewhere reads only
						// what the tree cached of it, else EIO (doc.go).
						t.Skip("open")
					}
				}
				if err := st.v.Remove(ctx, p, vault.RemoveOptions{FileOnly: true}, vault.Meta{}); err != nil {
					t.Fatalf("vault remove %s: %v", p, err)
				}
				delete(m.names, p)
			} else {
				d, _ := st.pickPath(t, true, "dir")
				p := join(d, rapid.SampledFrom(names).Draw(t, "name"))
				if m.isDir(p) {
					t.Skip("a directory")
				}
				data := genData(t, "data")
				if _, err := st.v.WriteFile(ctx, p, data, vault.WriteOptions{}, vault.Meta{}); err != nil {
					t.Fatalf("vault write %s: %v", p, err)
				}
				id, ok := m.names[p]
				if !ok {
					id = m.nextID
					m.nextID++
					m.names[p] = id
					m.inodes[id] = &minode{}
				}
				m.inodes[id].data = data
			}
			if err := tr.Refresh(ctx); err != nil {
				t.Fatalf("refresh: %v", err)
			}
		},
	})
}

// A file-size limit the tree did not know of is found at the commit: the
// close reports EFBIG, and the vault and the tree keep the old content.
func TestFileSizeFoundAtCommit(t *testing.T) {
	ctx := context.Background()
	one := int64(1)
	v := testVault(t, vault.Quota{MaxFileSizeMB: &one})
	if _, err := v.WriteFile(ctx, "/f", []byte("old content"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	tr := testTree(t, v, Options{Poll: -1})
	e, errno := tr.Lookup(ctx, tr.Root(), "f")
	if errno != 0 {
		t.Fatal(errno)
	}
	f, _, errno := tr.Open(ctx, e, syscall.O_WRONLY|syscall.O_TRUNC)
	if errno != 0 {
		t.Fatal(errno)
	}
	tr.maxFileSize.Store(0) // the cached limit is missing
	if errno := tr.Write(ctx, f, pattern(2<<20), 0); errno != 0 {
		t.Fatalf("buffered write: %v", errno)
	}
	if errno := tr.Flush(ctx, f); errno != syscall.EFBIG && errno != syscall.EDQUOT {
		t.Fatalf("close after 2 MiB: got %v, want EFBIG or EDQUOT", errno)
	}
	tr.Release(ctx, f)
	if data, _, err := v.ReadFile(ctx, "/f"); err != nil || string(data) != "old content" {
		t.Fatalf("vault after failed commit: %d bytes, %v; want the old content", len(data), err)
	}
	f, _, _ = tr.Open(ctx, e, syscall.O_RDONLY)
	defer tr.Release(ctx, f)
	buf := make([]byte, 100)
	if n, errno := tr.Read(ctx, f, buf, 0); errno != 0 || string(buf[:n]) != "old content" {
		t.Fatalf("tree after failed commit: %q, %v; want the old content", buf[:n], errno)
	}
}
