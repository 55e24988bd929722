package mount

import (
	"context"
	"os"
	"sort"
	"sync/atomic"
	"syscall"

	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/vault"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// errGone answers a request for a node whose entry the tree no longer
// has: it was removed (the kernel may still hold a name it looked up just
// before), or Invalidate dropped it (and the kernel looks names up again).
const errGone = syscall.ENOENT

// node is what every kind of kernel node shares: the vault inode number it
// stands for. Its state lives in the tree's entry for that number, so
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
func (m *Mount) newNode(e *tree.Entry) (fs.InodeEmbedder, fs.StableAttr) {
	id := fs.StableAttr{Mode: tree.TypeBits(e.Kind()), Ino: e.Ino(), Gen: 1}
	switch e.Kind() {
	case vault.KindDir:
		return &dirNode{node{m: m, ino: e.Ino()}}, id
	case vault.KindSymlink:
		return &linkNode{node{m: m, ino: e.Ino()}}, id
	case vault.KindFile:
		return &fileNode{node: node{m: m, ino: e.Ino()}}, id
	}
	// A fifo, socket or device: the kernel serves its opens itself.
	return &node{m: m, ino: e.Ino()}, id
}

// fillAttr renders a as FUSE attributes.
func fillAttr(a tree.Attr, out *fuse.Attr) {
	out.Ino, out.Size, out.Blocks, out.Blksize = a.Ino, a.Size, a.Blocks, tree.BlockSize
	out.Mode, out.Nlink, out.Uid, out.Gid, out.Rdev = a.Mode, a.Nlink, a.Uid, a.Gid, a.Rdev
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
}

// creator is the process a request comes from, who owns what it creates.
func (m *Mount) creator(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return m.uid, m.gid
}

// entryOf resolves the entry a request is about: the open file's, if
// the request carries one, else the current entry for the node.
func (n *node) entryOf(fh fs.FileHandle) *tree.Entry {
	if h, ok := handleOf(fh); ok {
		return h.f.Entry()
	}
	return n.m.t.Node(n.ino)
}

var _ = (fs.NodeGetattrer)((*node)(nil))

// Getattr answers from the tree. go-fuse hands in some open handle of the
// node even for stat(2); the node's current entry wins over a handle left
// from before Invalidate.
func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e := n.m.t.Node(n.ino)
	if e == nil {
		e = n.entryOf(fh)
	}
	if e == nil {
		return errGone
	}
	var a tree.Attr
	if errno := n.m.t.Attr(n.m.ctx, e, &a); errno != 0 {
		return errno
	}
	fillAttr(a, &out.Attr)
	return 0
}

var _ = (fs.NodeSetattrer)((*node)(nil))

// Setattr handles chmod, utimens, truncate and chown.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	e := n.entryOf(fh)
	if e == nil {
		return errGone
	}
	if e.Kind() == vault.KindFile {
		n.m.track(n.EmbeddedInode())
	}
	_, byHandle := handleOf(fh)
	var size *int64
	if sz, ok := in.GetSize(); ok {
		s := int64(sz)
		size = &s
	}
	var a vault.Attrs
	if mode, ok := in.GetMode(); ok {
		fm := vault.FileMode(mode & 0o7777)
		a.Mode = &fm
	}
	if mtime, ok := in.GetMTime(); ok {
		a.Mtime = &mtime
	}
	if atime, ok := in.GetATime(); ok {
		a.Atime = &atime
	}
	if uid, ok := in.GetUID(); ok {
		u := int64(uid)
		a.Uid = &u
	}
	if gid, ok := in.GetGID(); ok {
		g := int64(gid)
		a.Gid = &g
	}
	var at tree.Attr
	if errno := n.m.t.SetAttr(n.m.ctx, e, !byHandle, size, a, &at); errno != 0 {
		return errno
	}
	fillAttr(at, &out.Attr)
	return 0
}

var _ = (fs.NodeStatfser)((*node)(nil))

// Statfs reports the vault's quota as capacity.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, errno := n.m.t.Statfs(n.m.ctx)
	if errno != 0 {
		return errno
	}
	out.Bsize, out.Frsize, out.NameLen = tree.BlockSize, tree.BlockSize, vault.MaxNameLen
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bfree
	out.Files, out.Ffree = st.Files, st.Ffree
	return 0
}

// dirNode is a directory node.
type dirNode struct{ node }

// child renders e into a reply and returns its kernel node.
func (d *dirNode) child(ctx context.Context, e *tree.Entry, out *fuse.EntryOut) *fs.Inode {
	fillAttr(d.m.t.Stat(e), &out.Attr)
	ops, id := d.m.newNode(e)
	return d.NewInode(ctx, ops, id)
}

// self returns the directory's entry, or errGone once it is gone.
func (d *dirNode) self() (*tree.Entry, syscall.Errno) {
	e := d.m.t.Node(d.ino)
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
	e, errno := d.m.t.Lookup(d.m.ctx, de, name)
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
	parent, ents, errno := d.m.t.List(d.m.ctx, de)
	if errno != 0 {
		return nil, 0, errno
	}
	list := make([]fuse.DirEntry, 0, len(ents)+2)
	list = append(list,
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: de.Ino(), Off: 1},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parent, Off: 2})
	for _, c := range ents {
		list = append(list, fuse.DirEntry{Name: c.Name, Mode: tree.TypeBits(c.Kind), Ino: c.Ino, Off: c.Ino + 2})
	}
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
	return d.m.synced(d.m.t.CommitQueue(d.m.ctx))
}

var _ = (fs.NodeMkdirer)((*dirNode)(nil))

// Mkdir creates a directory.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.t.Create(d.m.ctx, d.ino, name, tree.Spec{Kind: vault.KindDir, Perm: mode, Uid: uid, Gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeCreater)((*dirNode)(nil))

// Create creates a regular file and opens it.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if d.m.ro {
		return nil, nil, 0, syscall.EROFS
	}
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.t.Create(d.m.ctx, d.ino, name, tree.Spec{Kind: vault.KindFile, Perm: mode, Uid: uid, Gid: gid})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	in := d.child(ctx, e, out)
	d.m.track(in)
	markOpened(in)
	f, keep, errno := d.m.t.Open(d.m.ctx, e, flags&^syscall.O_TRUNC)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, fl := d.m.handle(f, keep, flags)
	return in, h, fl, 0
}

var _ = (fs.NodeTmpfiler)((*dirNode)(nil))

// Tmpfile makes a file with no name (O_TMPFILE) and opens it. It lives in
// memory until it is linked into place (linkat through /proc/self/fd),
// which creates it in the vault with its content; closed unlinked, it
// leaves nothing.
func (d *dirNode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, f, errno := d.m.t.Tmpfile(d.m.ctx, d.ino, mode, uid, gid)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fillAttr(d.m.t.Stat(e), &out.Attr)
	ops, id := d.m.newNode(e)
	in := d.NewInode(ctx, ops, id)
	d.m.track(in)
	markOpened(in)
	h, fl := d.m.handle(f, true, flags)
	return in, h, fl, 0
}

var _ = (fs.NodeMknoder)((*dirNode)(nil))

// Mknod creates a regular file, fifo, socket or device node. The kernel
// has checked that the caller may make a device node (CAP_MKNOD).
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	kind, ok := tree.KindOf(mode)
	if !ok {
		return nil, syscall.EINVAL
	}
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.t.Create(d.m.ctx, d.ino, name, tree.Spec{Kind: kind, Perm: mode, Rdev: uint64(dev), Uid: uid, Gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeSymlinker)((*dirNode)(nil))

// Symlink creates a symbolic link.
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	uid, gid := d.m.creator(ctx)
	e, errno := d.m.t.Create(d.m.ctx, d.ino, name, tree.Spec{Kind: vault.KindSymlink, Perm: 0o777, Target: target, Uid: uid, Gid: gid})
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeLinker)((*dirNode)(nil))

// Link makes name another name of target (a hard link).
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e, errno := d.m.t.Link(d.m.ctx, target.EmbeddedInode().StableAttr().Ino, d.ino, name)
	if errno != 0 {
		return nil, errno
	}
	return d.child(ctx, e, out), 0
}

var _ = (fs.NodeUnlinker)((*dirNode)(nil))

// Unlink removes a file or symlink.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.m.t.Remove(d.m.ctx, d.ino, name, false)
}

var _ = (fs.NodeRmdirer)((*dirNode)(nil))

// Rmdir removes an empty directory.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.m.t.Remove(d.m.ctx, d.ino, name, true)
}

var _ = (fs.NodeRenamer)((*dirNode)(nil))

// Rename moves an entry, replacing the destination unless
// RENAME_NOREPLACE is given.
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	nd, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	return d.m.t.Rename(d.m.ctx, d.ino, name, nd.ino, newName, flags)
}

// linkNode is a symbolic link node.
type linkNode struct{ node }

var _ = (fs.NodeReadlinker)((*linkNode)(nil))

// Readlink returns the target from the tree.
func (l *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	e := l.m.t.Node(l.ino)
	if e == nil {
		return nil, errGone
	}
	return []byte(l.m.t.Readlink(e)), 0
}

// fileNode is a regular file node.
type fileNode struct {
	node
	// opened is set by the first OPEN of the kernel's inode, or by the
	// CREATE that made it: until then its page cache is empty (prefill).
	// A file created through the mount has the pages its writes
	// filled.
	opened atomic.Bool
	// written is set by a WRITE, and cleared by the next read-only open,
	// which hands the kernel the file's last page (prefill): a page that
	// a write through the kernel filled only in part is not kept as
	// valid, and the first read of every file written through the mount
	// cost a READ round trip for it.
	written atomic.Bool
}

// markOpened records that in, a regular file's node, was opened.
func markOpened(in *fs.Inode) {
	if f, ok := in.Operations().(*fileNode); ok {
		f.opened.Store(true)
	}
}

var _ = (fs.NodeOnForgetter)((*fileNode)(nil))

// OnForget drops the node from the ones the tree's notifications reach.
func (f *fileNode) OnForget() { f.m.untrack(f.EmbeddedInode()) }

// handle is one open file description.
type handle struct {
	f *tree.File
	// in and unread are set when the open handed the kernel the file's
	// content (prefill): the read it is for is recorded (its access
	// time) at Release, or at Sync if that comes first. Guarded by
	// Mount.mu.
	in     *fs.Inode
	unread bool
}

// backedHandle is a handle with a backing file: go-fuse registers it
// with the kernel (FilePassthroughFder), which then serves its reads
// from that file (FOPEN_PASSTHROUGH).
type backedHandle struct{ handle }

var _ = (fs.FilePassthroughFder)((*backedHandle)(nil))

// PassthroughFd is the backing file's descriptor, valid until Release.
func (h *backedHandle) PassthroughFd() (int, bool) {
	return int(h.f.Backing().Fd()), true
}

// handleOf is the handle behind fh, of either kind.
func handleOf(fh fs.FileHandle) (*handle, bool) {
	switch h := fh.(type) {
	case *handle:
		return h, true
	case *backedHandle:
		return &h.handle, true
	}
	return nil, false
}

// handle wraps f for the kernel. Read-only handles ask for no FLUSH,
// which saves a round trip per close; so do the others when their close
// would only queue the file's content (tree.Tree.QueuesCloses): the last
// RELEASE queues it instead (Release), the one round trip of a close
// rather than two (cp -r and git's objects: a sixth of their requests;
// bash's `printf > f`, which closes two descriptors, more). Every handle
// keeps the page cache unless a failed commit or Invalidate made it
// wrong.
func (m *Mount) handle(f *tree.File, keep bool, flags uint32) (fs.FileHandle, uint32) {
	var fl uint32
	if keep {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0 ||
		f.Backing() == nil && m.t.QueuesCloses() {
		fl |= fuse.FOPEN_NOFLUSH
	}
	if f.Backing() != nil {
		return &backedHandle{handle{f: f}}, fl
	}
	return &handle{f: f}, fl
}

var _ = (fs.NodeOpener)((*fileNode)(nil))

// pageSize is the size of the kernel's pages, the unit of its page cache.
var pageSize = os.Getpagesize()

// Open opens the file. O_TRUNC arrives here (atomic O_TRUNC) and is
// buffered with the writes that follow.
func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	m := f.m
	e := m.t.Node(f.ino)
	if e == nil {
		return nil, 0, errGone
	}
	m.track(f.EmbeddedInode())
	tf, keep, errno := m.t.Open(m.ctx, e, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, fl := m.handle(tf, keep, flags)
	first := !f.opened.Swap(true)
	readOnly := flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0
	if keep && readOnly && flags&syscall.O_DIRECT == 0 && tf.Backing() == nil {
		switch {
		case first:
			m.prefill(f.EmbeddedInode(), h.(*handle), false)
		case f.written.Swap(false):
			m.prefill(f.EmbeddedInode(), h.(*handle), true)
		}
	}
	return h, fl, 0
}

// prefill hands a small file's content to the kernel's page cache
// before the reply to the first read-only OPEN of the kernel's inode
// (one it looked up, not one created through the mount),
// when the tree has it in memory (tree.Tree.Prefill): the reader's
// read(2) then finds it there, and the READ round trip it would have
// cost (one of three per cold small file: LOOKUP, OPEN, READ) is not
// made. Later opens keep what the kernel cached or read it again as
// before: storing again would only copy the same bytes, and move the
// access time of a read the kernel may serve from pages it kept.
//
// With tail set, prefill hands over only the file's last page, when the
// file ends inside one: the first read-only open after writes through the
// mount (fileNode.written). The kernel keeps the pages those writes filled
// whole, but not a page they filled in part; without it, git add after cp
// -r sent a READ for each of 2,000 files.
//
// The open keeps the page cache
// (FOPEN_KEEP_CACHE), which is what the caller checked. A write or a
// change from the vault that landed while the content was on its way
// drops the pages again before the open returns, so no reader is left
// with bytes the file no longer holds.
//
// The mount never sees that read, so the access time moves when the
// descriptor is released (or at Sync, if that comes first): an open that
// reads nothing still shows its old access time while it is open, as
// fstat(2) checks, and a read is in the vault when Sync returns.
func (m *Mount) prefill(in *fs.Inode, h *handle, tail bool) {
	data := m.t.Prefill(h.f)
	if data == nil {
		return
	}
	off := 0
	if tail {
		if off = len(data) &^ (pageSize - 1); off == len(data) {
			return // no page filled in part
		}
	}
	if errno := in.WriteCache(int64(off), data[off:]); errno != 0 {
		return // the READ fetches it
	}
	if !m.t.Prefilled(h.f, data) {
		in.NotifyContent(0, 0)
		return
	}
	m.mu.Lock()
	h.in, h.unread = in, true
	m.unread[h] = struct{}{}
	m.mu.Unlock()
}

// readDone records the read of h's prefilled content, once: its access
// time moves (relatime), and the kernel, which never sent the READ after
// which it drops its cached access time, is told to drop it now.
func (m *Mount) readDone(h *handle) {
	m.mu.Lock()
	unread := h.unread
	h.unread = false
	delete(m.unread, h)
	m.mu.Unlock()
	if unread && m.t.Accessed(h.f) {
		h.in.NotifyContent(-1, 0)
	}
}

var _ = (fs.NodeReader)((*fileNode)(nil))

// Read serves buffered writes from memory and the rest from the vault.
func (f *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := handleOf(fh)
	if !ok {
		return nil, syscall.EBADF
	}
	n, errno := f.m.t.Read(f.m.ctx, h.f, dest, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(dest[:n]), 0
}

var _ = (fs.NodeWriter)((*fileNode)(nil))

// Write buffers data; it reaches the vault at flush, fsync or close.
func (f *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := handleOf(fh)
	if !ok {
		return 0, syscall.EBADF
	}
	if errno := f.m.t.Write(f.m.ctx, h.f, data, off); errno != 0 {
		return 0, errno
	}
	f.written.Store(true)
	return uint32(len(data)), 0
}

var _ = (fs.NodeFlusher)((*fileNode)(nil))

// Flush commits the file's buffered writes: close(2) reports a failed
// commit, quota errors included. In a vault without quotas, which cannot
// refuse them, they are queued instead (tree.Tree.Flush).
func (f *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	h, ok := handleOf(fh)
	if !ok {
		return 0
	}
	return f.m.t.Flush(f.m.ctx, h.f)
}

var _ = (fs.NodeFsyncer)((*fileNode)(nil))

// Fsync commits the file's buffered writes, and the queue, where a close
// may have left its content.
func (f *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	h, ok := handleOf(fh)
	if !ok {
		return f.m.synced(f.m.t.CommitQueue(f.m.ctx))
	}
	// A passthrough-backed file commits here too: the tree copies its
	// backing file into the vault (tree.Tree.Fsync).
	return f.m.synced(f.m.t.Fsync(f.m.ctx, h.f))
}

// synced ends an fsync whose commit returned errno: a committed one runs
// Options.OnSync before the reply, and fails with EIO if it does.
func (m *Mount) synced(errno syscall.Errno) syscall.Errno {
	if errno != 0 || m.onSync == nil || m.ro {
		return errno
	}
	if err := m.onSync(m.syncCtx); err != nil {
		m.log.Warn("fsync: committed to the vault, but not held as asked (OnSync)", keyErr, err)
		return syscall.EIO
	}
	return 0
}

var _ = (fs.NodeReleaser)((*fileNode)(nil))

// Release commits what is still buffered when the last handle closes
// (writes through a shared mapping can arrive after the last flush).
func (f *fileNode) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	if h, ok := handleOf(fh); ok {
		// Before the release: the file's entry is still the
		// descriptor's.
		f.m.readDone(h)
		f.m.t.Release(f.m.ctx, h.f)
	}
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
	f.m.track(f.EmbeddedInode())
	return f.m.t.Extend(f.m.ctx, e, int64(off+size), fh == nil)
}

// maxCopy bounds one copy_file_range request; the caller loops for more.
const maxCopy = 4 << 20

var _ = (fs.NodeCopyFileRanger)((*fileNode)(nil))

// CopyFileRange copies within the mount in memory: read through one
// handle, buffered as a write on the other. It spares the kernel's
// fallback a READ and a WRITE round trip per 128 KiB (cargo copies every
// artifact it cannot hard-link).
func (f *fileNode) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, n uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok := handleOf(fhIn)
	dst, ok2 := handleOf(fhOut)
	if !ok || !ok2 || flags != 0 {
		return 0, syscall.EINVAL
	}
	buf := make([]byte, min(n, maxCopy))
	got, errno := f.m.t.Read(f.m.ctx, in.f, buf, int64(offIn))
	if errno != 0 || got == 0 {
		return 0, errno
	}
	if errno := f.m.t.Write(f.m.ctx, dst.f, buf[:got], int64(offOut)); errno != 0 {
		return 0, errno
	}
	return uint32(got), 0
}

var _ = (fs.NodeLseeker)((*fileNode)(nil))

// Lseek answers SEEK_DATA and SEEK_HOLE from the vault's chunk list, so
// that cp --sparse and tar -S skip holes instead of reading zeros. A file
// with buffered changes is all data until they are committed.
func (f *fileNode) Lseek(ctx context.Context, fh fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL // the kernel seeks the others itself
	}
	e := f.entryOf(fh)
	if e == nil {
		return 0, errGone
	}
	at, errno := f.m.t.Seek(f.m.ctx, e, int64(off), whence == unix.SEEK_HOLE)
	return uint64(at), errno
}
