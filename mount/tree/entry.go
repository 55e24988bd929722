package tree

import (
	"container/list"
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/avfs/avfs/vault"
)

// RootIno is the vault's root directory, which is also FUSE's root node id.
const RootIno = 1

// errGone answers a request for a node whose entry the mount no longer
// has: it was removed (the kernel may still hold a name it looked up just
// before), or Invalidate dropped it (and the kernel looks names up again).
const errGone = syscall.ENOENT

// Entry is the mount's in-memory copy of one vault entry: its attributes,
// where it sits in the tree and, for a directory, its listing once loaded.
// Lookups and attribute requests are answered from entries without a
// database query. ino and kind never change; every other field is guarded
// by Mount.mu.
type Entry struct {
	ino    uint64
	kind   vault.Kind
	mode   uint32 // permission, setuid, setgid and sticky bits
	size   int64
	mtime  int64 // Unix nanoseconds
	ctime  int64
	atime  int64
	target string // symlink target
	// uid and gid are vault.NoOwner when the vault recorded none: the
	// mount shows the mounting user's.
	uid, gid int64
	rdev     uint64
	nlink    uint32

	parent *Entry // nil for the root and for removed entries
	name   string
	// links are the other names of a hard-linked non-directory that the
	// mount knows of (in the directories it loaded); (parent, name) is
	// the one its path is made of.
	links     []place
	unlinked  bool // removed from the tree while still open
	tmp       bool // made by O_TMPFILE and not yet linked: only in memory
	stale     bool // the root after Invalidate: attributes must be read again
	dropCache bool // the kernel's pages may be wrong: the next open must not keep them
	queued    bool // created through the mount, the create still in the queue

	// children is a directory's complete listing, nil until loaded. A
	// directory is loaded only below a loaded parent: a catch-up finds the
	// directories to read again by walking down from the root
	// (deepestLoadedLocked), and would miss one below an unloaded parent.
	children map[string]*Entry
	// negative holds names this directory answered ENOENT for, so that
	// Invalidate can drop the kernel's negative dentries too.
	negative map[string]struct{}
	// fetches counts the files of this directory whose content was read
	// from the vault: from the second one on, a read reads ahead.
	fetches int

	// data is a regular file's content state while it is open or has
	// buffered changes.
	data *fileData
	// content is a small file's committed content, while cached
	// (Mount.cache); cached is its place in the cache's LRU list.
	content []byte
	cached  *list.Element

	// key is the content key (vault.Tx.ContentKey) of the file as it was
	// when its size, mtime and ctime were keySize, keyMtime and
	// keyCtime: still its key while they are the same (backedLocked).
	key                         string
	keySize, keyMtime, keyCtime int64
}

func newEntry(v vault.Entry) *Entry {
	e := &Entry{ino: v.Ino, kind: v.Kind}
	e.refresh(v)
	return e
}

// refresh copies the vault's view of e's attributes into e.
func (e *Entry) refresh(v vault.Entry) {
	e.mode, e.size, e.target = vault.ModeBits(v.Mode), v.Size, v.Target
	e.mtime, e.ctime, e.atime = v.Mtime.UnixNano(), v.Ctime.UnixNano(), v.Atime.UnixNano()
	e.uid, e.gid, e.rdev, e.nlink = v.Uid, v.Gid, v.Rdev, v.Nlink
	e.stale = false
}

// place is one name of an entry: a directory and a name in it.
type place struct {
	dir  *Entry
	name string
}

// hasPlaceLocked reports whether (d, name) is one of c's names. Caller
// holds t.mu.
func (c *Entry) hasPlaceLocked(d *Entry, name string) bool {
	if c.parent == d && c.name == name {
		return true
	}
	for _, l := range c.links {
		if l.dir == d && l.name == name {
			return true
		}
	}
	return false
}

// addPlaceLocked records (d, name) as a name of c: its path's, if it has
// none, else another (a hard link). Caller holds t.mu.
func (c *Entry) addPlaceLocked(d *Entry, name string) {
	switch {
	case c.hasPlaceLocked(d, name):
	case c.parent == nil || c.kind == vault.KindDir:
		c.parent, c.name = d, name
	default:
		c.links = append(c.links, place{d, name})
	}
}

// dropPlaceLocked forgets (d, name) as a name of c and reports whether c
// has another one left, which then makes its path. Caller holds t.mu.
func (c *Entry) dropPlaceLocked(d *Entry, name string) bool {
	for i, l := range c.links {
		if l.dir == d && l.name == name {
			c.links = append(c.links[:i], c.links[i+1:]...)
			return true
		}
	}
	if c.parent == d && c.name == name && len(c.links) > 0 {
		c.parent, c.name = c.links[0].dir, c.links[0].name
		c.links = c.links[1:]
		return true
	}
	return false
}

// unlinkNameLocked takes name out of directory d after the vault removed
// it at now: of an entry with other names, just that name (and one
// link); otherwise the entry (removeLocked). Caller holds t.mu.
func (t *Tree) unlinkNameLocked(d *Entry, name string, c *Entry, now time.Time) {
	if c.kind != vault.KindDir && c.dropPlaceLocked(d, name) {
		if d.children != nil && d.children[name] == c {
			delete(d.children, name)
		}
		c.nlink = max(c.nlink, 2) - 1
		c.ctime = now.UnixNano()
		return
	}
	t.removeLocked(c)
}

// otherNames reports whether c has a name besides the one being removed:
// then it is not orphaned.
func (t *Tree) otherNames(c *Entry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.kind != vault.KindDir && len(c.links) > 0
}

// kindBits pairs each vault kind with its S_IFMT bits.
var kindBits = []struct {
	kind vault.Kind
	bits uint32
}{
	{vault.KindFile, syscall.S_IFREG},
	{vault.KindDir, syscall.S_IFDIR},
	{vault.KindSymlink, syscall.S_IFLNK},
	{vault.KindFifo, syscall.S_IFIFO},
	{vault.KindSocket, syscall.S_IFSOCK},
	{vault.KindCharDev, syscall.S_IFCHR},
	{vault.KindBlkDev, syscall.S_IFBLK},
}

// TypeBits is the S_IFMT part of the entry's mode.
func TypeBits(k vault.Kind) uint32 {
	for _, kb := range kindBits {
		if kb.kind == k {
			return kb.bits
		}
	}
	return syscall.S_IFREG
}

// KindOf is the vault kind for the S_IFMT part of a mode (0: a file).
func KindOf(mode uint32) (vault.Kind, bool) {
	t := mode & syscall.S_IFMT
	if t == 0 {
		return vault.KindFile, true
	}
	for _, kb := range kindBits {
		if kb.bits == t {
			return kb.kind, kb.kind != vault.KindDir && kb.kind != vault.KindSymlink
		}
	}
	return 0, false
}

// Attr is what stat(2) shows of an entry.
type Attr struct {
	Ino    uint64
	Size   uint64
	Blocks uint64 // of 512 bytes
	Mode   uint32 // file type and mode bits, as st_mode
	Nlink  uint32
	Uid    uint32
	Gid    uint32
	Rdev   uint32
	// Unix nanoseconds.
	Atime, Mtime, Ctime int64
}

// fillAttr renders e's attributes. An entry the vault records no
// owner for belongs to the mounting user. Directories count 2 links plus
// one per subdirectory, as on ext4.
func (t *Tree) fillAttr(e *Entry, a *Attr) {
	a.Ino = e.ino
	a.Size = uint64(e.size)
	a.Blocks = (uint64(e.size) + 511) / 512
	a.Mode = TypeBits(e.kind) | e.mode
	a.Nlink = max(e.nlink, 1)
	if e.unlinked {
		a.Nlink = 0
	}
	a.Uid, a.Gid = t.uid, t.gid
	if e.uid >= 0 {
		a.Uid = uint32(e.uid)
	}
	if e.gid >= 0 {
		a.Gid = uint32(e.gid)
	}
	a.Rdev = uint32(e.rdev)
	a.Mtime, a.Atime, a.Ctime = e.mtime, e.atime, e.ctime
	backedAttrLocked(e, a)
	if e.data != nil && e.data.dirty {
		// The kernel now holds attributes that the commit will change
		// (mtime becomes the commit's time): it is told to drop them.
		e.data.shown = true
	}
}

// pathLocked renders e's vault path; ok is false when e is no longer in
// the tree. Caller holds t.mu.
func (t *Tree) pathLocked(e *Entry) (string, bool) {
	if e == t.root {
		return "/", true
	}
	var names []string
	n := 0
	for p := e; p != t.root; p = p.parent {
		if p == nil || p.unlinked {
			return "", false
		}
		names = append(names, p.name)
		n += len(p.name) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for i := len(names) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(names[i])
	}
	return b.String(), true
}

// path is pathLocked for callers without t.mu. The result stays valid as
// long as the caller holds t.nsMu, which every namespace change takes.
func (t *Tree) path(e *Entry) (string, syscall.Errno) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.pathLocked(e)
	if !ok {
		return "", syscall.ENOENT
	}
	return p, 0
}

// childPath joins a directory path and a name.
func childPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// entry returns the current entry for ino, or nil when the mount no longer
// knows it (removed, or dropped by Invalidate).
func (t *Tree) entry(ino uint64) *Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.metas[ino]
}

// current reports whether e is still the mount's entry for its inode.
func (t *Tree) currentLocked(e *Entry) bool { return t.metas[e.ino] == e }

// attr returns e's attributes, reading them again from the vault first if
// Invalidate marked them stale.
func (t *Tree) attr(ctx context.Context, e *Entry, a *Attr) syscall.Errno {
	t.mu.Lock()
	stale := e.stale
	if !stale {
		t.fillAttr(e, a)
	}
	t.mu.Unlock()
	if !stale {
		return 0
	}
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	p, errno := t.path(e)
	if errno != 0 {
		return errno
	}
	if err := t.flushHeld(ctx); err != nil {
		return t.errno("stat", p, err)
	}
	st, err := t.v.Stat(ctx, p)
	if err != nil {
		return t.errno("stat", p, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st.Ino != e.ino {
		return syscall.ESTALE
	}
	e.refresh(st)
	t.fillAttr(e, a)
	return 0
}

// lookup finds name in directory d, loading d's listing from the vault on
// first use. It answers ENOENT for a missing name and records it, so that
// Invalidate can tell the kernel to forget the negative entry.
func (t *Tree) lookup(ctx context.Context, d *Entry, name string) (*Entry, syscall.Errno) {
	if errno := t.load(ctx, d); errno != 0 {
		return nil, errno
	}
	return t.child(d, name)
}

// lookupHeld is lookup for callers that hold t.nsMu.
func (t *Tree) lookupHeld(ctx context.Context, d *Entry, name string) (*Entry, syscall.Errno) {
	if errno := t.loadHeld(ctx, d); errno != 0 {
		return nil, errno
	}
	return t.child(d, name)
}

func (t *Tree) child(d *Entry, name string) (*Entry, syscall.Errno) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.children == nil {
		// Invalidate ran since the load.
		return nil, syscall.ESTALE
	}
	c := d.children[name]
	if c == nil {
		if d.negative == nil {
			d.negative = map[string]struct{}{}
		}
		d.negative[name] = struct{}{}
		return nil, syscall.ENOENT
	}
	return c, 0
}

// load reads directory d's listing from the vault unless it is loaded.
// One read transaction lists the whole directory with every child's
// attributes, so later lookups in it cost no query.
func (t *Tree) load(ctx context.Context, d *Entry) syscall.Errno {
	t.mu.Lock()
	loaded := d.children != nil
	t.mu.Unlock()
	if loaded {
		return 0
	}
	// Holding nsMu keeps both the path and the listing unchanged until
	// the listing is installed.
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	return t.loadHeld(ctx, d)
}

// loadHeld is load for callers that hold t.nsMu.
func (t *Tree) loadHeld(ctx context.Context, d *Entry) syscall.Errno {
	t.mu.Lock()
	loaded, kind := d.children != nil, d.kind
	p, ok := t.pathLocked(d)
	t.mu.Unlock()
	switch {
	case loaded:
		return 0
	case kind != vault.KindDir:
		return syscall.ENOTDIR
	case !ok:
		return syscall.ENOENT
	}
	// Queued access times may stay queued: the children of a directory
	// not yet loaded were not read through this mount.
	if err := t.flushForRead(ctx); err != nil {
		return t.errno("readdir", p, err)
	}
	var self vault.Entry
	var list []vault.Entry
	err := t.v.View(ctx, func(tx *vault.Tx) error {
		var err error
		if self, err = tx.Stat(p); err != nil {
			return err
		}
		list, err = tx.ReadDir(p)
		return err
	})
	if err != nil {
		return t.errno("readdir", p, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.currentLocked(d) || self.Ino != d.ino {
		return syscall.ESTALE
	}
	if d.children != nil {
		return 0 // a concurrent load won
	}
	if d.stale {
		d.refresh(self)
	}
	d.children = make(map[string]*Entry, len(list))
	for _, v := range list {
		c := t.metas[v.Ino]
		if c == nil {
			c = newEntry(v)
			t.metas[v.Ino] = c
		}
		// An entry already known (created through the mount before
		// the listing was needed) is newer than the vault's copy. One
		// with several names keeps the others (hard links).
		if v.Nlink > 1 && v.Kind != vault.KindDir {
			c.addPlaceLocked(d, v.Name)
		} else {
			c.parent, c.name = d, v.Name
		}
		d.children[v.Name] = c
	}
	return 0
}

// addChildLocked links a new entry under d, as a create through the mount
// does. Caller holds t.mu.
func (t *Tree) addChildLocked(d *Entry, name string, c *Entry, now time.Time) {
	c.parent, c.name = d, name
	t.metas[c.ino] = c
	if d.children != nil {
		d.children[name] = c
	}
	delete(d.negative, name)
	d.touch(now)
	d.nlink += subdir(c)
}

// subdir is what entry c adds to its directory's link count.
func subdir(c *Entry) uint32 {
	if c.kind == vault.KindDir {
		return 1
	}
	return 0
}

// touch records that a directory's entries changed at now, as the vault
// does in the same transaction.
func (e *Entry) touch(now time.Time) {
	e.mtime, e.ctime = now.UnixNano(), now.UnixNano()
}

// removeLocked takes c out of the tree after the vault removed it. An open
// file stays known (unlinked, with no path) until its last handle closes.
func (t *Tree) removeLocked(c *Entry) {
	if c.parent != nil && c.parent.children != nil && c.parent.children[c.name] == c {
		delete(c.parent.children, c.name)
	}
	if c.parent != nil {
		c.parent.nlink -= subdir(c)
	}
	for _, l := range c.links {
		if l.dir.children != nil && l.dir.children[l.name] == c {
			delete(l.dir.children, l.name)
		}
	}
	c.parent, c.links = nil, nil
	c.unlinked = true
	t.uncacheLocked(c)
	if c.data == nil || c.data.opens == 0 {
		if t.metas[c.ino] == c {
			delete(t.metas, c.ino)
		}
		if c.data != nil {
			delete(t.dirty, c)
		}
	}
}
