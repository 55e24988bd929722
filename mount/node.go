package mount

import (
	"context"
	"sort"
	"syscall"

	"github.com/avfs/avfs/vault"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is what every kind of kernel node shares: the vault inode number it
// stands for. Its state lives in the Mount's entry for that number, so
// several node values for one inode (go-fuse keeps the first one it
// registered) are interchangeable.
type node struct {
	fs.Inode
	m   *Mount
	ino uint64
}

// newNode returns the kernel node for e and its stable identity: the
// vault's inode number, which survives unmounts, forks and restores and
// is never reused within a vault, so one generation suffices.
func (m *Mount) newNode(e *entry) (fs.InodeEmbedder, fs.StableAttr) {
	id := fs.StableAttr{Mode: typeBits(e.kind), Ino: e.ino, Gen: 1}
	switch e.kind {
	case vault.KindDir:
		return &dirNode{node{m: m, ino: e.ino}}, id
	case vault.KindSymlink:
		return &linkNode{node{m: m, ino: e.ino}}, id
	case vault.KindFile:
		return &fileNode{node{m: m, ino: e.ino}}, id
	}
	// A fifo, socket or device: the kernel serves its opens itself.
	return &node{m: m, ino: e.ino}, id
}

// entryOf resolves the entry a request is about: the open handle's, if
// the request carries one, else the current entry for the node.
func (n *node) entryOf(fh fs.FileHandle) *entry {
	if h, ok := fh.(*handle); ok {
		return h.e
	}
	return n.m.entry(n.ino)
}

var _ = (fs.NodeGetattrer)((*node)(nil))

// Getattr answers from the entry cache. go-fuse hands in some open
// handle of the node even for stat(2); the node's current entry wins over
// a handle left from before Invalidate.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e := n.m.entry(n.ino)
	if e == nil {
		e = n.entryOf(fh)
	}
	if e == nil {
		return errGone
	}
	return n.m.attr(n.m.ctx, e, &out.Attr)
}

var _ = (fs.NodeSetattrer)((*node)(nil))

// Setattr handles chmod, utimens, truncate and chown.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	e := n.entryOf(fh)
	if e == nil {
		return errGone
	}
	_, byHandle := fh.(*handle)
	return n.m.setattr(n.m.ctx, n.EmbeddedInode(), e, !byHandle, in, out)
}

var _ = (fs.NodeStatfser)((*node)(nil))

// Statfs reports the vault's quota as capacity.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return n.m.statfs(n.m.ctx, out)
}

// dirNode is a directory node.
type dirNode struct{ node }

// child renders e into a reply and returns its kernel node.
func (d *dirNode) child(ctx context.Context, e *entry, out *fuse.EntryOut) *fs.Inode {
	d.m.mu.Lock()
	d.m.fillAttr(e, &out.Attr)
	d.m.mu.Unlock()
	ops, id := d.m.newNode(e)
	return d.NewInode(ctx, ops, id)
}

// self returns the directory's entry, or errGone once it is gone.
func (d *dirNode) self() (*entry, syscall.Errno) {
	e := d.m.entry(d.ino)
	if e == nil {
		return nil, errGone
	}
	return e, 0
}

var _ = (fs.NodeLookuper)((*dirNode)(nil))

// Lookup answers from the directory's cached listing.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if len(name) > vault.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	de, errno := d.self()
	if errno != 0 {
		return nil, errno
	}
	if name == d.m.panicOn && name != "" {
		panic("injected fault: lookup of " + name)
	}
	e, errno := d.m.lookup(d.m.ctx, de, name)
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeOpendirHandler)((*dirNode)(nil))

// OpendirHandle snapshots the listing. The kernel never sends OPENDIR
// (noOpendir): each READDIR gets a handle of its own, which must resume
// where the previous one stopped even if entries were removed or added
// in between. So the listing is ordered by inode number and an entry's
// offset is its inode number (plus 2, after "." and ".."): removing an
// entry moves no other, and new entries (new numbers are higher) come
// after the ones already read. The kernel caches the listing
// (FOPEN_CACHE_DIR, its default without OPENDIR): changes made through
// the mount invalidate that cache by themselves, and Invalidate does for
// the rest.
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	de, errno := d.self()
	if errno != 0 {
		return nil, 0, errno
	}
	if errno := d.m.load(d.m.ctx, de); errno != 0 {
		return nil, 0, errno
	}
	m := d.m
	m.mu.Lock()
	if de.children == nil {
		m.mu.Unlock()
		return nil, 0, syscall.ESTALE
	}
	parent := de.ino
	if de.parent != nil {
		parent = de.parent.ino
	}
	list := make([]fuse.DirEntry, 0, len(de.children)+2)
	list = append(list,
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: de.ino, Off: 1},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parent, Off: 2})
	for name, c := range de.children {
		list = append(list, fuse.DirEntry{Name: name, Mode: typeBits(c.kind), Ino: c.ino, Off: c.ino + 2})
	}
	m.mu.Unlock()
	sort.Slice(list[2:], func(i, j int) bool { return list[2+i].Off < list[2+j].Off })
	return &dirStream{list: list}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// dirStream serves a listing snapshot whose offsets (DirEntry.Off, in
// increasing order) do not depend on the snapshot: Seekdir resumes after
// the given offset whatever entries came or went.
type dirStream struct {
	list []fuse.DirEntry
	pos  int
}

var (
	_ = (fs.FileReaddirenter)((*dirStream)(nil))
	_ = (fs.FileSeekdirer)((*dirStream)(nil))
)

// Readdirent returns the next entry, or nil at the end.
func (s *dirStream) Readdirent(context.Context) (*fuse.DirEntry, syscall.Errno) {
	if s.pos >= len(s.list) {
		return nil, 0
	}
	de := s.list[s.pos]
	s.pos++
	return &de, 0
}

// Seekdir moves to the first entry after offset off.
func (s *dirStream) Seekdir(_ context.Context, off uint64) syscall.Errno {
	s.pos = sort.Search(len(s.list), func(i int) bool { return s.list[i].Off > off })
	return 0
}

var _ = (fs.NodeFsyncer)((*dirNode)(nil))

// Fsync on a directory commits the queued changes of the tree (creates,
// removals and renames), so that they survive a crash.
func (d *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return d.m.fsyncQueue()
}

// fsyncQueue commits the queued changes.
func (m *Mount) fsyncQueue() syscall.Errno {
	m.nsMu.RLock()
	err := m.flushHeld(m.ctx)
	m.nsMu.RUnlock()
	if err != nil {
		return m.errno("fsync", "", err)
	}
	return 0
}

var _ = (fs.NodeMkdirer)((*dirNode)(nil))

// Mkdir creates a directory.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.create(d.m.ctx, d.ino, name, newSpec{kind: vault.KindDir, perm: mode & 0o7777, uid: uid, gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeCreater)((*dirNode)(nil))

// Create creates a regular file and opens it.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.create(d.m.ctx, d.ino, name, newSpec{kind: vault.KindFile, perm: mode & 0o7777, uid: uid, gid: gid})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	in := d.child(ctx, e, out)
	h, fl := d.m.open(e, in, flags)
	return in, h, fl, 0
}

var _ = (fs.NodeTmpfiler)((*dirNode)(nil))

// Tmpfile makes a file with no name (O_TMPFILE) and opens it. It lives in
// memory until it is linked into place (linkat through /proc/self/fd),
// which creates it in the vault with its content; closed unlinked, it
// leaves nothing.
func (d *dirNode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.tmpfile(d.m.ctx, d.ino, mode&0o7777, uid, gid)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	d.m.mu.Lock()
	d.m.fillAttr(e, &out.Attr)
	d.m.mu.Unlock()
	ops, id := d.m.newNode(e)
	in := d.NewInode(ctx, ops, id)
	h, fl := d.m.open(e, in, flags)
	h.d.mu.Lock()
	h.d.orphan, h.d.orphanData = true, []byte{} // its writes stay in memory until a link
	h.d.mu.Unlock()
	return in, h, fl, 0
}

var _ = (fs.NodeMknoder)((*dirNode)(nil))

// Mknod creates a regular file, fifo, socket or device node. The kernel
// has checked that the caller may make a device node (CAP_MKNOD).
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	kind, ok := kindOf(mode)
	if !ok {
		return nil, syscall.EINVAL
	}
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.create(d.m.ctx, d.ino, name, newSpec{kind: kind, perm: mode & 0o7777, rdev: uint64(dev), uid: uid, gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeSymlinker)((*dirNode)(nil))

// Symlink creates a symbolic link.
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.create(d.m.ctx, d.ino, name, newSpec{kind: vault.KindSymlink, perm: 0o777, target: target, uid: uid, gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeLinker)((*dirNode)(nil))

// Link makes name another name of target (a hard link).
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e, errno := d.m.link(d.m.ctx, target.EmbeddedInode().StableAttr().Ino, d.ino, name)
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeUnlinker)((*dirNode)(nil))

// Unlink removes a file or symlink.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.m.remove(d.m.ctx, d.ino, name, false)
}

var _ = (fs.NodeRmdirer)((*dirNode)(nil))

// Rmdir removes an empty directory.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.m.remove(d.m.ctx, d.ino, name, true)
}

var _ = (fs.NodeRenamer)((*dirNode)(nil))

// Rename moves an entry, replacing the destination unless
// RENAME_NOREPLACE is given.
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	nd, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	return d.m.rename(d.m.ctx, d.ino, name, nd.ino, newName, flags)
}

// linkNode is a symbolic link node.
type linkNode struct{ node }

var _ = (fs.NodeReadlinker)((*linkNode)(nil))

// Readlink returns the target from the entry cache.
func (l *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	e := l.m.entry(l.ino)
	if e == nil {
		return nil, errGone
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return []byte(e.target), 0
}

// fileNode is a regular file node.
type fileNode struct{ node }

// handle is one open file description. It pins the entry and content
// state it was opened on, so a handle that outlives Invalidate fails
// with ESTALE instead of reaching whatever now has its path.
type handle struct {
	e *entry
	d *fileData
}

// open registers a new handle on e. Read-only handles ask for no FLUSH,
// which saves a round trip per close; every handle keeps the page cache
// unless a failed commit or Invalidate made it wrong.
func (m *Mount) open(e *entry, in *fs.Inode, flags uint32) (*handle, uint32) {
	d := m.acquire(e, in)
	fl := uint32(fuse.FOPEN_KEEP_CACHE)
	m.mu.Lock()
	if e.dropCache {
		e.dropCache = false
		fl = 0
	}
	m.mu.Unlock()
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0 {
		fl |= fuse.FOPEN_NOFLUSH
	}
	return &handle{e: e, d: d}, fl
}

var _ = (fs.NodeOpener)((*fileNode)(nil))

// Open opens the file. O_TRUNC arrives here (atomic O_TRUNC) and is
// buffered with the writes that follow.
func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	m := f.m
	if m.ro && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
		return nil, 0, syscall.EROFS
	}
	e := m.entry(f.ino)
	if e == nil {
		return nil, 0, errGone
	}
	h, fl := m.open(e, f.EmbeddedInode(), flags)
	if flags&syscall.O_TRUNC != 0 {
		if errno := m.truncate(m.ctx, e, f.EmbeddedInode(), 0, false); errno != 0 {
			m.release(e, h.d)
			return nil, 0, errno
		}
	}
	return h, fl, 0
}

var _ = (fs.NodeReader)((*fileNode)(nil))

// Read serves buffered writes from memory and the rest from the vault.
func (f *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	n, errno := f.m.read(f.m.ctx, h, dest, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(dest[:n]), 0
}

var _ = (fs.NodeWriter)((*fileNode)(nil))

// Write buffers data; it reaches the vault at flush, fsync or close.
func (f *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if errno := f.m.write(f.m.ctx, h, data, off); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

var _ = (fs.NodeFlusher)((*fileNode)(nil))

// Flush commits the file's buffered writes: close(2) reports a failed
// commit, quota errors included. In a vault without quotas, which cannot
// refuse them, they are queued instead (Mount.commitLater).
func (f *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok && f.m.commitLater(h.e) {
		return 0
	}
	return f.sync(fh)
}

var _ = (fs.NodeFsyncer)((*fileNode)(nil))

// Fsync commits the file's buffered writes, and the queue, where a close
// may have left its content (Mount.commitLater).
func (f *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if errno := f.sync(fh); errno != 0 {
		return errno
	}
	return f.m.fsyncQueue()
}

func (f *fileNode) sync(fh fs.FileHandle) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return 0
	}
	if err := f.m.commit(f.m.ctx, h.e); err != nil {
		return f.m.errno("flush", "", err)
	}
	return 0
}

var _ = (fs.NodeReleaser)((*fileNode)(nil))

// Release commits what is still buffered when the last handle closes
// (writes through a shared mapping can arrive after the last flush).
func (f *fileNode) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return 0
	}
	m := f.m
	m.mu.Lock()
	last := h.d.opens == 1
	m.mu.Unlock()
	if last && !m.commitLater(h.e) {
		if err := m.commit(m.ctx, h.e); err != nil {
			m.log.Warn("commit on release failed: buffered writes dropped", keyErr, err)
		}
	}
	m.release(h.e, h.d)
	return 0
}

var _ = (fs.NodeAllocater)((*fileNode)(nil))

// Allocate supports plain fallocate, which extends the file, and
// FALLOC_FL_KEEP_SIZE, which has nothing to reserve in a vault. Holes
// and ranges cannot be punched or zeroed.
func (f *fileNode) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	switch mode {
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	case 0:
	default:
		return syscall.EOPNOTSUPP
	}
	e := f.entryOf(fh)
	if e == nil {
		return errGone
	}
	f.m.mu.Lock()
	cur := e.size
	f.m.mu.Unlock()
	if end := int64(off + size); end > cur {
		return f.m.truncate(f.m.ctx, e, f.EmbeddedInode(), end, fh == nil)
	}
	return 0
}

// maxCopy bounds one copy_file_range request; the caller loops for more.
const maxCopy = 4 << 20

var _ = (fs.NodeCopyFileRanger)((*fileNode)(nil))

// CopyFileRange copies within the mount in memory: read through one
// handle, buffered as a write on the other. It spares the kernel's
// fallback a READ and a WRITE round trip per 128 KiB (cargo copies every
// artifact it cannot hard-link).
func (f *fileNode) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, n uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok := fhIn.(*handle)
	dst, ok2 := fhOut.(*handle)
	if !ok || !ok2 || flags != 0 {
		return 0, syscall.EINVAL
	}
	buf := make([]byte, min(n, maxCopy))
	got, errno := f.m.read(f.m.ctx, in, buf, int64(offIn))
	if errno != 0 || got == 0 {
		return 0, errno
	}
	if errno := f.m.write(f.m.ctx, dst, buf[:got], int64(offOut)); errno != 0 {
		return 0, errno
	}
	return uint32(got), 0
}

var _ = (fs.NodeLseeker)((*fileNode)(nil))

// Lseek answers SEEK_DATA and SEEK_HOLE from the vault's chunk list, so
// that cp --sparse and tar -S skip holes instead of reading zeros. A file
// with buffered changes is all data until they are committed.
func (f *fileNode) Lseek(ctx context.Context, fh fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	m := f.m
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL // the kernel seeks the others itself
	}
	e := f.entryOf(fh)
	if e == nil {
		return 0, errGone
	}
	m.mu.Lock()
	size, dirty := e.size, e.data != nil && e.data.dirty
	m.mu.Unlock()
	if int64(off) >= size {
		return 0, syscall.ENXIO
	}
	m.nsMu.RLock()
	defer m.nsMu.RUnlock()
	p, errno := m.path(e)
	if dirty || errno != 0 {
		if whence == unix.SEEK_DATA {
			return off, 0
		}
		return uint64(size), 0
	}
	if err := m.flushHeld(m.ctx); err != nil {
		return 0, m.errno("lseek", p, err)
	}
	at, ok, err := m.v.Seek(m.ctx, p, int64(off), whence == unix.SEEK_HOLE)
	switch {
	case err != nil:
		return 0, m.errno("lseek", p, err)
	case !ok:
		return 0, syscall.ENXIO
	}
	return uint64(at), 0
}
