package tree

import (
	"context"
	"os"
	"syscall"

	"github.com/avfs/avfs/vault"
)

// The operations a file system shows, by inode number, entry and open
// file, answered with POSIX's errno values. A caller (the FUSE mount)
// translates requests into these and their results into replies; the
// tree knows nothing of the kernel beyond what it tells Options.Kernel.

// Ino is e's inode number, the vault's, which never changes.
func (e *Entry) Ino() uint64 { return e.ino }

// Kind is e's kind, which never changes.
func (e *Entry) Kind() vault.Kind { return e.kind }

// Node returns the current entry for inode ino, or nil when the tree no
// longer knows it (removed, or dropped by Invalidate).
func (t *Tree) Node(ino uint64) *Entry { return t.entry(ino) }

// Root is the vault's root directory.
func (t *Tree) Root() *Entry { return t.entry(RootIno) }

// Attr returns e's attributes, read again from the vault first if
// Invalidate marked them stale.
func (t *Tree) Attr(ctx context.Context, e *Entry, a *Attr) syscall.Errno {
	return t.attr(ctx, e, a)
}

// Stat returns e's attributes as the tree holds them.
func (t *Tree) Stat(e *Entry) Attr {
	var a Attr
	t.mu.Lock()
	t.fillAttr(e, &a)
	t.mu.Unlock()
	return a
}

// Lookup finds name in directory d, loading d's listing from the vault
// on first use.
func (t *Tree) Lookup(ctx context.Context, d *Entry, name string) (*Entry, syscall.Errno) {
	if len(name) > vault.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	return t.lookup(ctx, d, name)
}

// Dirent is one name in a directory listing.
type Dirent struct {
	Name string
	Ino  uint64
	Kind vault.Kind
}

// List returns directory d's listing, in no order, and the inode number
// of its parent (its own for the root).
func (t *Tree) List(ctx context.Context, d *Entry) (parent uint64, list []Dirent, errno syscall.Errno) {
	if errno := t.load(ctx, d); errno != 0 {
		return 0, nil, errno
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.children == nil {
		return 0, nil, syscall.ESTALE
	}
	parent = d.ino
	if d.parent != nil {
		parent = d.parent.ino
	}
	list = make([]Dirent, 0, len(d.children))
	for name, c := range d.children {
		list = append(list, Dirent{Name: name, Ino: c.ino, Kind: c.kind})
	}
	return parent, list, 0
}

// Readlink is symlink e's target.
func (t *Tree) Readlink(e *Entry) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return e.target
}

// Spec is what a create asks for: the kind, the mode bits (after the
// caller's umask), the symlink target or device number, and the calling
// process's user and group, who own the new entry.
type Spec struct {
	Kind     vault.Kind
	Perm     uint32
	Target   string
	Rdev     uint64
	Uid, Gid uint32
}

// Create makes a file, directory, symlink or special node called name in
// directory dirIno.
func (t *Tree) Create(ctx context.Context, dirIno uint64, name string, s Spec) (*Entry, syscall.Errno) {
	return t.create(ctx, dirIno, name, newSpec{kind: s.Kind, perm: s.Perm & 0o7777, target: s.Target, rdev: s.Rdev, uid: s.Uid, gid: s.Gid})
}

// Tmpfile makes a file with no name (O_TMPFILE) in directory dirIno and
// opens it. It lives in memory until Link gives it a name, which creates
// it in the vault with its content; released unlinked, it leaves nothing.
func (t *Tree) Tmpfile(ctx context.Context, dirIno uint64, perm, uid, gid uint32) (*Entry, *File, syscall.Errno) {
	e, errno := t.tmpfile(ctx, dirIno, perm&0o7777, uid, gid)
	if errno != 0 {
		return nil, nil, errno
	}
	f, _ := t.open(e)
	f.d.mu.Lock()
	f.d.orphan, f.d.orphanData = true, []byte{} // its writes stay in memory until a link
	f.d.mu.Unlock()
	return e, f, 0
}

// Link makes newName in directory dirIno another name of inode ino.
func (t *Tree) Link(ctx context.Context, ino, dirIno uint64, newName string) (*Entry, syscall.Errno) {
	return t.link(ctx, ino, dirIno, newName)
}

// Remove removes name from directory dirIno: an empty directory if
// rmdir, else anything but a directory.
func (t *Tree) Remove(ctx context.Context, dirIno uint64, name string, rmdir bool) syscall.Errno {
	return t.remove(ctx, dirIno, name, rmdir)
}

// Rename moves name in dirIno to newName in newDirIno, with rename(2)'s
// checks and flags (RENAME_NOREPLACE, RENAME_EXCHANGE).
func (t *Tree) Rename(ctx context.Context, dirIno uint64, name string, newDirIno uint64, newName string, flags uint32) syscall.Errno {
	return t.rename(ctx, dirIno, name, newDirIno, newName, flags)
}

// File is one open file description of a regular file. It pins the
// entry and content state it was opened on, so a file that outlives
// Invalidate fails with ESTALE instead of reaching whatever now has its
// path.
type File struct {
	e       *Entry
	d       *fileData
	backing *os.File // the file's backing file (Options.Backing), or nil
	writer  bool     // backed, and open for writing
}

// Entry is the entry f was opened on.
func (f *File) Entry() *Entry { return f.e }

// Backing is the file holding f's content, which a kernel may read and
// write directly instead of asking (FUSE passthrough), or nil. With
// Options.Backing, a read-only File of a clean file of MinBacked bytes
// or more (and at most a quarter of the cache's bound) with no other
// open Files gets one. It is closed by Release.
//
// The kernel attaches one backing file to an inode while any File of it
// is open through one, and then requires every open of that inode to use
// it: so while a backed File is open, every open of the file gets the
// same backing file, for reading or writing. It is private to the file
// while open (checked out of the cache), and is the file's content: the
// tree reads, writes and truncates it too, copies it into the vault at
// flush, fsync and release, and copies a change made in the vault by
// someone else into it (passthrough.go).
func (f *File) Backing() *os.File { return f.backing }

// open registers a new File on e for reading and writing; keepCache is
// false when the kernel's pages of e may be wrong (a failed commit,
// Invalidate).
func (t *Tree) open(e *Entry) (f *File, keepCache bool) {
	f, keepCache, _ = t.openFlags(t.ctx, e, syscall.O_RDWR)
	return f, keepCache
}

// openFlags is open with open(2)'s flags: with a Backing, a read-only
// open of a clean file with no other Files but backed ones gets a
// backing file.
func (t *Tree) openFlags(ctx context.Context, e *Entry, flags uint32) (f *File, keepCache bool, errno syscall.Errno) {
	d := t.acquire(e)
	f = &File{e: e, d: d}
	if t.backing != nil && e.kind == vault.KindFile {
		readOnly := flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0
		t.nsMu.RLock()
		d.mu.Lock()
		t.mu.Lock()
		backed, cached, tmp := d.backed, d.opens-1-d.backed, e.tmp
		t.mu.Unlock()
		switch {
		case backed > 0:
			// The kernel requires every open of the file to use its
			// backing file, which is private to it: a write-open
			// writes it, and every descriptor sees the writes.
			fd, err := syscall.Dup(int(d.backingFile.Fd()))
			if err != nil {
				errno = t.errno("dup backing file", "", err)
				break
			}
			syscall.CloseOnExec(fd)
			f.backing = os.NewFile(uintptr(fd), d.backingFile.Name())
			if !readOnly {
				f.writer = true
				d.backingWriters++
				d.backingWritten = true
				t.mu.Lock()
				t.setDirtyLocked(e, d, !d.orphan)
				t.mu.Unlock()
			}
		case readOnly && cached == 0 && !d.dirty && !d.orphan && !d.stale && !tmp && t.backing.backs(d.size):
			bf, priv := t.backedLocked(ctx, e, d)
			if bf == nil {
				break
			}
			s, err := stampOf(bf)
			fd := -1
			if err == nil {
				fd, err = syscall.Dup(int(bf.Fd()))
			}
			if err != nil {
				t.backing.checkin(bf, priv, d.backedKey)
				d.backedKey = ""
				break
			}
			syscall.CloseOnExec(fd)
			f.backing = os.NewFile(uintptr(fd), bf.Name())
			d.backingPath = priv
			t.mu.Lock()
			d.backingFile, d.backingSync = bf, s
			t.mu.Unlock()
		}
		if f.backing != nil {
			t.mu.Lock()
			d.backed++
			t.mu.Unlock()
		}
		d.mu.Unlock()
		t.nsMu.RUnlock()
		if errno != 0 {
			t.release(e, d)
			return nil, false, errno
		}
	}
	t.mu.Lock()
	keepCache = !e.dropCache
	e.dropCache = false
	t.mu.Unlock()
	return f, keepCache, 0
}

// Open opens regular file e with open(2)'s flags. O_TRUNC is buffered
// with the writes that follow. keepCache says whether pages cached from
// before may be kept.
func (t *Tree) Open(ctx context.Context, e *Entry, flags uint32) (f *File, keepCache bool, errno syscall.Errno) {
	if t.ro && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
		return nil, false, syscall.EROFS
	}
	f, keepCache, errno = t.openFlags(ctx, e, flags)
	if errno != 0 {
		return nil, false, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		if errno := t.truncate(ctx, e, 0, false); errno != 0 {
			t.closeFile(f)
			return nil, false, errno
		}
	}
	return f, keepCache, 0
}

// Read fills dest from f at off: buffered writes from memory, the rest
// from the vault.
func (t *Tree) Read(ctx context.Context, f *File, dest []byte, off int64) (int, syscall.Errno) {
	return t.read(ctx, f, dest, off)
}

// Write buffers data at off; it reaches the vault at Flush, Fsync,
// Release or Sync, or earlier past Options.MaxDirty.
func (t *Tree) Write(ctx context.Context, f *File, data []byte, off int64) syscall.Errno {
	return t.write(ctx, f, data, off)
}

// Flush is a close of f: it commits the file's buffered writes, so that
// close(2) reports a refused commit; in a vault without quotas, with
// Options.QueueCloses, it queues them instead.
func (t *Tree) Flush(ctx context.Context, f *File) syscall.Errno {
	if t.commitLater(f.e) {
		return 0
	}
	return t.fsyncFile(ctx, f)
}

// QueuesCloses reports whether a close queues the file's content rather
// than commit it (Options.QueueCloses, in a vault with no quota that
// could refuse it, for a file without a backing file): a FLUSH of such a
// file then does nothing the last RELEASE does not do (Release), and the
// mount may ask the kernel for none. A quota set while the file is open
// makes that RELEASE commit, and a refusal is only logged: close(2) had
// already returned.
func (t *Tree) QueuesCloses() bool { return t.noQuota.Load() }

// Fsync commits f's buffered writes, and the queue, where a close may
// have left its content.
func (t *Tree) Fsync(ctx context.Context, f *File) syscall.Errno {
	if errno := t.fsyncFile(ctx, f); errno != 0 {
		return errno
	}
	return t.CommitQueue(ctx)
}

func (t *Tree) fsyncFile(ctx context.Context, f *File) syscall.Errno {
	if err := t.commit(ctx, f.e); err != nil {
		return t.errno("flush", "", err)
	}
	return 0
}

// Release closes f. The last File of an entry commits (or queues) what
// is still buffered: writes through a shared mapping can arrive after
// the last flush, and where closes are queued (QueuesCloses) the kernel
// sends no FLUSH; there any File queues them.
func (t *Tree) Release(ctx context.Context, f *File) {
	t.mu.Lock()
	last := f.d.opens == 1
	t.mu.Unlock()
	switch {
	case last:
		if !t.commitLater(f.e) {
			if err := t.commit(ctx, f.e); err != nil {
				t.log.Warn("commit on release failed: buffered writes dropped", keyErr, err)
			}
		}
	case t.QueuesCloses():
		// The kernel sent no FLUSH for this close (QueuesCloses): queue
		// what it wrote now, as that FLUSH would have, rather than
		// when the file's other descriptors close.
		t.commitLater(f.e)
	}
	t.closeFile(f)
}

// closeFile drops f's counts and closes its backing file; the last
// backed File of a file closes the file's.
func (t *Tree) closeFile(f *File) {
	if f.backing != nil {
		d := f.d
		d.mu.Lock()
		t.mu.Lock()
		d.backed--
		if f.writer {
			d.backingWriters--
		}
		var bf *os.File
		var priv, key string
		written := false
		if d.backed == 0 && d.backingFile != nil {
			bf, priv, key, written = d.backingFile, d.backingPath, d.backedKey, d.backingWritten
			d.backingFile, d.backingPath, d.backedKey, d.backingSync, d.backingWritten = nil, "", "", stamp{}, false
		}
		dirty := d.dirty
		t.mu.Unlock()
		if bf != nil && (dirty || d.orphan || written) {
			// Changes the vault did not take (a failed commit), or
			// an unlinked file's: they go with the backing file. So
			// does one that was open for writing: a shared mapping
			// may outlive every descriptor and still write it.
			key = ""
			if dirty {
				t.discardLocked(f.e, d)
			}
		}
		d.mu.Unlock()
		if bf != nil {
			t.backing.checkin(bf, priv, key)
		}
		f.backing.Close()
	}
	t.release(f.e, f.d)
}

// CommitQueue commits the queued changes (creates, removals, renames,
// closes): fsync of a directory.
func (t *Tree) CommitQueue(ctx context.Context) syscall.Errno {
	t.nsMu.RLock()
	err := t.flushHeld(ctx)
	t.nsMu.RUnlock()
	if err != nil {
		return t.errno("fsync", "", err)
	}
	return 0
}

// Extend grows file e to at least end bytes (fallocate). byPath is a
// change by name, committed at once.
func (t *Tree) Extend(ctx context.Context, e *Entry, end int64, byPath bool) syscall.Errno {
	if errno, ok := t.extendBacked(ctx, e, end, byPath); ok {
		return errno
	}
	t.mu.Lock()
	cur := e.size
	t.mu.Unlock()
	if end > cur {
		return t.truncate(ctx, e, end, byPath)
	}
	return 0
}

// Seek answers SEEK_DATA (hole false) and SEEK_HOLE (hole true) from the
// vault's chunk list. A file with buffered changes is all data until
// they are committed.
func (t *Tree) Seek(ctx context.Context, e *Entry, off int64, hole bool) (int64, syscall.Errno) {
	if at, errno, ok := t.seekBacked(e, off, hole); ok {
		return at, errno
	}
	t.mu.Lock()
	size, dirty := e.size, e.data != nil && e.data.dirty
	t.mu.Unlock()
	if off >= size {
		return 0, syscall.ENXIO
	}
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	p, errno := t.path(e)
	if dirty || errno != 0 {
		if !hole {
			return off, 0
		}
		return size, 0
	}
	if err := t.flushHeld(ctx); err != nil {
		return 0, t.errno("lseek", p, err)
	}
	at, ok, err := t.v.Seek(ctx, p, off, hole)
	switch {
	case err != nil:
		return 0, t.errno("lseek", p, err)
	case !ok:
		return 0, syscall.ENXIO
	}
	return at, 0
}
