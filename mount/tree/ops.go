package tree

import (
	"context"
	"fmt"
	iofs "io/fs"
	"syscall"
	"time"

	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
)

// The operations below carry the semantics the node types expose. Each
// change is a vault transaction, except removals and renames, which are
// checked against the entry cache, answered, and queued for the next one.

// newSpec is what a create asks for: the kind, the mode bits (after the
// caller's umask), the symlink target or device number, and the calling
// process's user and group, who own the new entry.
type newSpec struct {
	kind     vault.Kind
	perm     uint32
	target   string
	rdev     uint64
	uid, gid uint32
}

// create makes a file, directory, symlink or special node called name in
// directory dirIno. A file or directory is answered at once and queued,
// with an inode number reserved in the vault, when nothing in the vault
// can refuse it: a new file's create then rides on the commit of its
// content.
func (t *Tree) create(ctx context.Context, dirIno uint64, name string, ns newSpec) (*Entry, syscall.Errno) {
	if t.ro {
		return nil, syscall.EROFS
	}
	if len(name) > vault.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	d := t.entry(dirIno)
	if d == nil {
		return nil, errGone
	}
	dp, errno := t.path(d)
	if errno != 0 {
		return nil, errno
	}
	p := childPath(dp, name)
	kind := ns.kind
	t.mu.Lock()
	// What the vault gives the entry in a setgid directory (Tx.create).
	mode, gid := vault.Inherit(vault.FileMode(d.mode), d.gid, kind, vault.FileMode(ns.perm), int64(ns.gid))
	t.mu.Unlock()
	if c, errno := t.createQueued(ctx, d, p, name, ns, mode, gid); errno != 0 || c != nil {
		return c, errno
	}
	var st vault.Entry
	err := t.update(ctx, func(tx *vault.Tx) error {
		return tx.AsOwner(ns.uid, ns.gid, func() error {
			ino := tx.NextIno()
			if err := createIn(tx, p, ns, vault.FileMode(ns.perm), nil); err != nil {
				return err
			}
			if tx.NextIno() != ino+1 {
				// Not the one number a create takes: ask the vault.
				var err error
				st, err = tx.Stat(p)
				return err
			}
			// What the vault just stored, known without a second walk.
			st = vault.Entry{Name: name, Path: p, Kind: kind, Mode: mode, Ino: ino, Mtime: tx.Time(), Ctime: tx.Time(), Atime: tx.Time(),
				Uid: int64(ns.uid), Gid: gid, Nlink: 1}
			switch kind {
			case vault.KindSymlink:
				st.Mode, st.Size, st.Target = 0o777, int64(len(ns.target)), ns.target
			case vault.KindDir:
				st.Nlink = 2
			case vault.KindCharDev, vault.KindBlkDev:
				st.Rdev = ns.rdev
			}
			return nil
		})
	})
	if err != nil {
		return nil, t.errno("create", p, err)
	}
	now := st.Ctime
	c := newEntry(st)
	t.mu.Lock()
	if kind == vault.KindDir && d.children != nil {
		c.children = map[string]*Entry{} // see entry.children
	}
	t.addChildLocked(d, name, c, now)
	t.mu.Unlock()
	return c, 0
}

// createQueued creates a file or directory in the entry cache and queues
// it, after the checks the vault would make. It returns a nil entry and
// no error when the create must be committed at once instead: a symlink,
// a directory where closes are not queued (Options.QueueCloses off: a
// file's create is committed by its close, before close returns), a vault
// with a max_files quota (the one limit a create can break), a name or
// path the vault should judge, or no reserved inode number left. Caller
// holds t.nsMu exclusively.
func (t *Tree) createQueued(ctx context.Context, d *Entry, p, name string, ns newSpec, mode iofs.FileMode, gid int64) (*Entry, syscall.Errno) {
	kind := ns.kind
	if (kind != vault.KindFile && kind != vault.KindDir) || !t.queueCloses && kind != vault.KindFile || t.maxFiles.Load() || len(p) > vault.MaxTreePathLen ||
		len(name) > vault.MaxNameLen || vault.ValidName(name) != nil {
		return nil, 0
	}
	switch _, errno := t.lookupHeld(ctx, d, name); errno {
	case 0:
		return nil, syscall.EEXIST
	case syscall.ENOENT:
	default:
		return nil, errno
	}
	ino, ok := t.takeIno()
	if !ok {
		return nil, 0
	}
	now := time.Now()
	st := vault.Entry{Name: name, Path: p, Kind: kind, Mode: mode, Ino: ino, Mtime: now, Ctime: now, Atime: now,
		Uid: int64(ns.uid), Gid: gid, Nlink: 1}
	if kind == vault.KindDir {
		st.Nlink = 2
	}
	c := newEntry(st)
	c.queued = true
	perm := vault.FileMode(ns.perm)
	t.enqueue(change{op: opCreate, from: p, kind: kind, mode: &perm, uid: ns.uid, gid: ns.gid, ino: ino, e: c, at: now})
	t.mu.Lock()
	if kind == vault.KindDir && d.children != nil {
		c.children = map[string]*Entry{} // see entry.children
	}
	t.addChildLocked(d, name, c, now)
	t.mu.Unlock()
	return c, 0
}

// createIn creates one entry of ns's kind, target and device number at
// p in tx, with mode bits mode; a file holds data.
func createIn(tx *vault.Tx, p string, ns newSpec, mode iofs.FileMode, data []byte) error {
	var err error
	switch ns.kind {
	case vault.KindFile:
		_, err = tx.WriteFile(p, data, vault.WriteOptions{Mode: mode, Exclusive: true})
	case vault.KindDir:
		err = tx.Mkdir(p, mode, false)
	case vault.KindSymlink:
		err = tx.Symlink(ns.target, p)
	default:
		err = tx.Mknod(p, ns.kind, mode, ns.rdev)
	}
	if err != nil {
		return err
	}
	if mode == 0 && ns.kind != vault.KindSymlink {
		// The vault reads mode 0 as "default": ask for it again.
		if _, err := tx.SetAttr(p, &mode, nil); err != nil {
			return err
		}
	}
	return nil
}

// remove unlinks name from directory dirIno: a directory only for rmdir,
// anything else only for unlink.
func (t *Tree) remove(ctx context.Context, dirIno uint64, name string, rmdir bool) syscall.Errno {
	if t.ro {
		return syscall.EROFS
	}
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	d := t.entry(dirIno)
	if d == nil {
		return errGone
	}
	c, errno := t.lookupHeld(ctx, d, name)
	if errno != 0 {
		return errno
	}
	if errno := t.checkKind(ctx, c, rmdir); errno != 0 {
		return errno
	}
	dp, errno := t.path(d)
	if errno != 0 {
		return errno
	}
	// The name removed, which of a hard-linked file need not be the
	// one its path is made of.
	p := childPath(dp, name)
	var o orphaning
	if !t.otherNames(c) {
		o = t.keepOpen(c)
	}
	if o.ready() && t.queueCloses {
		now := time.Now()
		if rmdir || !t.renameQueued(p, now) {
			t.enqueue(change{op: opRemove, from: p, rmdir: rmdir, at: now})
		}
		o.done(true)
		t.mu.Lock()
		t.unlinkNameLocked(d, name, c, now)
		d.touch(now)
		t.mu.Unlock()
		return 0
	}
	// An open file whose content is not at hand: it must be read in the
	// transaction that removes it, so this removal cannot wait.
	var now time.Time
	err := t.update(ctx, func(tx *vault.Tx) error {
		if err := o.read(tx, p); err != nil {
			return err
		}
		now = tx.Time()
		return tx.Remove(p, vault.RemoveOptions{DirOnly: rmdir, FileOnly: !rmdir})
	})
	o.done(err == nil)
	if err != nil {
		return t.errno("remove", p, err)
	}
	t.mu.Lock()
	t.unlinkNameLocked(d, name, c, now)
	d.touch(now)
	t.mu.Unlock()
	return 0
}

// rename moves name in dirIno to newName in newDirIno. RENAME_NOREPLACE is
// honoured; RENAME_EXCHANGE and RENAME_WHITEOUT are EINVAL, which is how
// renameat2(2) reports flags a file system does not support.
func (t *Tree) rename(ctx context.Context, dirIno uint64, name string, newDirIno uint64, newName string, flags uint32) syscall.Errno {
	if t.ro {
		return syscall.EROFS
	}
	if flags == unix.RENAME_EXCHANGE {
		return t.exchange(ctx, dirIno, name, newDirIno, newName)
	}
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL
	}
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	sd, dd := t.entry(dirIno), t.entry(newDirIno)
	if sd == nil || dd == nil {
		return errGone
	}
	c, errno := t.lookupHeld(ctx, sd, name)
	if errno != 0 {
		return errno
	}
	victim, errno := t.lookupHeld(ctx, dd, newName)
	switch {
	case errno == syscall.ENOENT:
		victim = nil
	case errno != 0:
		return errno
	case victim == c:
		return 0 // both names are the same entry: nothing to do
	}
	noReplace := flags&unix.RENAME_NOREPLACE != 0
	if errno := t.checkRename(ctx, c, dd, newName, victim, noReplace); errno != 0 {
		return errno
	}
	sp, errno := t.path(sd)
	if errno != 0 {
		return errno
	}
	sp = childPath(sp, name)
	dp, errno := t.path(dd)
	if errno != 0 {
		return errno
	}
	dp = childPath(dp, newName)
	if len(dp) > vault.MaxTreePathLen {
		return syscall.ENAMETOOLONG
	}
	var o orphaning
	if victim != nil && !t.otherNames(victim) {
		o = t.keepOpen(victim)
	}
	if o.ready() && t.queueCloses {
		now := time.Now()
		t.enqueue(change{op: opRename, from: sp, to: dp, noReplace: noReplace, at: now})
		o.done(true)
		t.move(sd, name, c, dd, newName, victim, now)
		return 0
	}
	var now time.Time
	err := t.update(ctx, func(tx *vault.Tx) error {
		if err := o.read(tx, dp); err != nil {
			return err
		}
		now = tx.Time()
		return tx.Rename(sp, dp, vault.RenameOptions{NoReplace: flags&unix.RENAME_NOREPLACE != 0})
	})
	o.done(err == nil)
	if err != nil {
		return t.errno("rename", sp, err)
	}
	t.move(sd, name, c, dd, newName, victim, now)
	return 0
}

// move records a rename in the entry cache.
func (t *Tree) move(sd *Entry, name string, c, dd *Entry, newName string, victim *Entry, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if victim != nil {
		t.unlinkNameLocked(dd, newName, victim, now)
	}
	if sd.children != nil && sd.children[name] == c {
		delete(sd.children, name)
	}
	sd.nlink -= subdir(c)
	dd.nlink += subdir(c)
	if c.kind != vault.KindDir && c.dropPlaceLocked(sd, name) {
		c.addPlaceLocked(dd, newName) // one of several names moved
	} else {
		c.parent, c.name = dd, newName
	}
	if dd.children != nil {
		dd.children[newName] = c
	}
	delete(dd.negative, newName)
	sd.touch(now)
	dd.touch(now)
}

// exchange swaps name in dirIno and newName in newDirIno
// (RENAME_EXCHANGE), in one vault transaction.
func (t *Tree) exchange(ctx context.Context, dirIno uint64, name string, newDirIno uint64, newName string) syscall.Errno {
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	sd, dd := t.entry(dirIno), t.entry(newDirIno)
	if sd == nil || dd == nil {
		return errGone
	}
	a, errno := t.lookupHeld(ctx, sd, name)
	if errno != 0 {
		return errno
	}
	b, errno := t.lookupHeld(ctx, dd, newName)
	if errno != 0 {
		return errno
	}
	if a == b {
		return 0
	}
	t.mu.Lock()
	for _, x := range []struct{ moved, into *Entry }{{a, dd}, {b, sd}} {
		if x.moved.kind != vault.KindDir {
			continue
		}
		for d := x.into; d != nil; d = d.parent {
			if d == x.moved {
				t.mu.Unlock()
				return syscall.EINVAL // into itself
			}
		}
	}
	t.mu.Unlock()
	sp, errno := t.path(sd)
	if errno != 0 {
		return errno
	}
	dp, errno := t.path(dd)
	if errno != 0 {
		return errno
	}
	sp, dp = childPath(sp, name), childPath(dp, newName)
	var now time.Time
	err := t.update(ctx, func(tx *vault.Tx) error {
		now = tx.Time()
		return tx.Rename(sp, dp, vault.RenameOptions{Exchange: true})
	})
	if err != nil {
		return t.errno("rename", sp, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	swap := func(c, from *Entry, fromName string, to *Entry, toName string) {
		if c.kind != vault.KindDir && c.dropPlaceLocked(from, fromName) {
			c.addPlaceLocked(to, toName)
		} else {
			c.parent, c.name = to, toName
		}
		if to.children != nil {
			to.children[toName] = c
		}
	}
	swap(a, sd, name, dd, newName)
	swap(b, dd, newName, sd, name)
	sd.nlink += subdir(b) - subdir(a)
	dd.nlink += subdir(a) - subdir(b)
	sd.touch(now)
	dd.touch(now)
	return 0
}

// link makes newName in directory dirIno another name of the entry ino
// (a hard link), in one vault transaction.
func (t *Tree) link(ctx context.Context, ino, dirIno uint64, newName string) (*Entry, syscall.Errno) {
	if t.ro {
		return nil, syscall.EROFS
	}
	if len(newName) > vault.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	c, d := t.entry(ino), t.entry(dirIno)
	if c == nil || d == nil {
		return nil, errGone
	}
	if c.kind == vault.KindDir {
		return nil, syscall.EPERM
	}
	switch _, errno := t.lookupHeld(ctx, d, newName); errno {
	case 0:
		return nil, syscall.EEXIST
	case syscall.ENOENT:
	default:
		return nil, errno
	}
	t.mu.Lock()
	tmp := c.tmp
	t.mu.Unlock()
	if tmp {
		return t.linkTmp(ctx, c, d, newName)
	}
	op, errno := t.path(c)
	if errno != 0 {
		return nil, errno
	}
	dp, errno := t.path(d)
	if errno != 0 {
		return nil, errno
	}
	np := childPath(dp, newName)
	if t.noQuota.Load() {
		// Nothing left that the vault could refuse (no max_files, and
		// the link count is checked here): queued like a rename, so
		// git's link and unlink of each object cost no transaction.
		now := time.Now()
		t.mu.Lock()
		full := c.nlink >= vault.MaxLinks
		single := c.nlink == 1 && len(c.links) == 0
		t.mu.Unlock()
		if full {
			return nil, syscall.EMLINK
		}
		t.enqueue(change{op: opLink, from: op, to: np, at: now, single: single})
		t.mu.Lock()
		defer t.mu.Unlock()
		c.nlink++
		c.ctime = now.UnixNano()
		t.linkedLocked(c, d, newName, now)
		return c, 0
	}
	var st vault.Entry
	err := t.update(ctx, func(tx *vault.Tx) error {
		if err := tx.Link(op, np); err != nil {
			return err
		}
		var err error
		st, err = tx.Stat(np)
		return err
	})
	if err != nil {
		return nil, t.errno("link", np, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.data == nil || !c.data.dirty {
		c.refresh(st)
	} else {
		c.nlink, c.ctime = st.Nlink, st.Ctime.UnixNano()
	}
	t.linkedLocked(c, d, newName, st.Ctime)
	return c, 0
}

// linkedLocked records newName in directory d as a name of c, made at
// now. Caller holds t.mu.
func (t *Tree) linkedLocked(c, d *Entry, newName string, now time.Time) {
	c.addPlaceLocked(d, newName)
	if d.children != nil {
		d.children[newName] = c
	}
	delete(d.negative, newName)
	d.touch(now)
}

// tmpfile makes the in-memory entry of an O_TMPFILE file in directory
// dirIno, with mode bits perm, owned by uid and gid. Its inode number is
// reserved in the vault, so a link can create it under that number.
func (t *Tree) tmpfile(ctx context.Context, dirIno uint64, perm, uid, gid uint32) (*Entry, syscall.Errno) {
	if t.ro {
		return nil, syscall.EROFS
	}
	d := t.entry(dirIno)
	if d == nil {
		return nil, errGone
	}
	ino, ok := t.takeIno()
	if !ok {
		if err := t.update(ctx, func(tx *vault.Tx) error {
			ino = tx.ReserveInos(1)
			return nil
		}); err != nil {
			return nil, t.errno("create", "", err)
		}
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	mode, g := vault.Inherit(vault.FileMode(d.mode), d.gid, vault.KindFile, vault.FileMode(perm), int64(gid))
	e := newEntry(vault.Entry{Kind: vault.KindFile, Mode: mode, Ino: ino, Mtime: now, Ctime: now, Atime: now,
		Uid: int64(uid), Gid: g, Nlink: 1})
	e.unlinked, e.tmp = true, true
	t.metas[ino] = e
	return e, 0
}

// linkTmp gives O_TMPFILE file c its first name, newName in directory d:
// the vault creates it there, under its reserved inode number, with the
// content written so far. Caller holds t.nsMu exclusively.
func (t *Tree) linkTmp(ctx context.Context, c, d *Entry, newName string) (*Entry, syscall.Errno) {
	t.mu.Lock()
	fd := c.data
	t.mu.Unlock()
	if fd == nil {
		return nil, syscall.ENOENT // closed: gone
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.size > MaxOrphan {
		// Its content is made whole in memory here: a size set by
		// ftruncate or a write far out (holes cost nothing until now)
		// must not make the mount allocate it.
		return nil, syscall.ENOSPC
	}
	data := make([]byte, fd.size)
	if _, err := fd.read(data, 0, func(buf []byte, _ int64) (int, error) { clear(buf); return len(buf), nil }); err != nil {
		return nil, t.errno("link", "", err)
	}
	dp, errno := t.path(d)
	if errno != 0 {
		return nil, errno
	}
	np := childPath(dp, newName)
	t.mu.Lock()
	mode, uid, gid := vault.FileMode(c.mode), c.uid, c.gid
	t.mu.Unlock()
	var st vault.Entry
	err := t.update(ctx, func(tx *vault.Tx) error {
		err := tx.AsOwner(uint32(uid), uint32(gid), func() error {
			return tx.CreateWithIno(c.ino, func() error {
				return createIn(tx, np, newSpec{kind: vault.KindFile}, mode, data)
			})
		})
		if err != nil {
			return err
		}
		st, err = tx.Stat(np)
		return err
	})
	if err != nil {
		return nil, t.errno("link", np, err)
	}
	t.account(fd, func() { fd.committed(st.Mtime.UnixNano(), st.Ctime.UnixNano()) })
	fd.orphan, fd.orphanData = false, nil
	t.mu.Lock()
	defer t.mu.Unlock()
	c.refresh(st)
	c.unlinked, c.tmp = false, false
	c.parent, c.name = d, newName
	t.metas[c.ino] = c
	if d.children != nil {
		d.children[newName] = c
	}
	delete(d.negative, newName)
	d.touch(st.Ctime)
	return c, 0
}

// checkKind does the checks of rmdir(2) and unlink(2) that the vault
// would, so that a removal can be answered before it is committed.
// Caller holds t.nsMu.
func (t *Tree) checkKind(ctx context.Context, c *Entry, rmdir bool) syscall.Errno {
	isDir := c.kind == vault.KindDir
	switch {
	case rmdir && !isDir:
		return syscall.ENOTDIR
	case !rmdir && isDir:
		return syscall.EISDIR
	case isDir:
		return t.checkEmpty(ctx, c)
	}
	return 0
}

// checkEmpty answers ENOTEMPTY unless directory c is empty. Caller holds
// t.nsMu.
func (t *Tree) checkEmpty(ctx context.Context, c *Entry) syscall.Errno {
	if errno := t.loadHeld(ctx, c); errno != 0 {
		return errno
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(c.children) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

// checkRename does the checks of rename(2) that the vault would, so that
// a rename can be answered before it is committed, in the vault's order
// (Tx.Rename): EEXIST for RENAME_NOREPLACE, the victim's type, a
// directory moved into itself (EINVAL), then the victim's emptiness.
// Caller holds t.nsMu.
func (t *Tree) checkRename(ctx context.Context, c, dd *Entry, newName string, victim *Entry, noReplace bool) syscall.Errno {
	if len(newName) > vault.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if vault.ValidName(newName) != nil {
		return syscall.EINVAL
	}
	if victim != nil {
		switch {
		case noReplace:
			return syscall.EEXIST
		case victim.kind == vault.KindDir && c.kind != vault.KindDir:
			return syscall.EISDIR
		case victim.kind != vault.KindDir && c.kind == vault.KindDir:
			return syscall.ENOTDIR
		}
	}
	if c.kind == vault.KindDir && t.within(dd, c) {
		return syscall.EINVAL // into itself
	}
	if victim != nil && victim.kind == vault.KindDir {
		return t.checkEmpty(ctx, victim)
	}
	return 0
}

// within says whether d is c or below it.
func (t *Tree) within(d, c *Entry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for a := d; a != nil; a = a.parent {
		if a == c {
			return true
		}
	}
	return false
}

// orphaning keeps the committed content of a file that is being unlinked
// (or renamed over) while open, so its descriptors can still read it, as
// POSIX requires. The zero value keeps nothing.
type orphaning struct {
	d       *fileData
	content []byte
}

// keepOpen prepares to orphan c if it is an open file. The caller holds
// t.nsMu exclusively, so no commit can change the content meanwhile;
// keepOpen locks the fileData until done.
func (t *Tree) keepOpen(c *Entry) orphaning {
	t.mu.Lock()
	d := c.data
	open := d != nil && d.opens > 0
	t.mu.Unlock()
	if !open {
		return orphaning{}
	}
	d.mu.Lock()
	t.mu.Lock()
	content := t.cachedLocked(c)
	t.mu.Unlock()
	if content == nil && d.vsize == 0 {
		content = []byte{}
	}
	return orphaning{d: d, content: content}
}

// ready reports whether nothing needs reading before the removal, which
// can then be queued.
func (o *orphaning) ready() bool { return o.d == nil || o.content != nil }

// read loads the committed content in the transaction that removes it.
func (o *orphaning) read(tx *vault.Tx, p string) error {
	if o.d == nil || o.content != nil || o.d.vsize > MaxOrphan {
		return nil
	}
	data, _, err := tx.ReadFile(p)
	o.content = data
	return err
}

// done orphans the file if the removal committed, and unlocks it.
func (o *orphaning) done(removed bool) {
	if o.d == nil {
		return
	}
	if removed {
		o.d.orphan, o.d.orphanData = true, o.content
	}
	o.d.mu.Unlock()
}

// acquire returns e's fileData, creating it, and counts one more user.
func (t *Tree) acquire(e *Entry) *fileData {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.data == nil {
		e.data = newFileData(e)
	}
	e.data.opens++
	return e.data
}

// release drops one user of d. The last one frees d if it is clean, and
// forgets e if it was unlinked meanwhile.
func (t *Tree) release(e *Entry, d *fileData) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d.opens--
	if d.opens > 0 {
		return
	}
	if e.data == d && !d.dirty {
		e.data = nil
	}
	if e.unlinked && t.metas[e.ino] == e {
		delete(t.metas, e.ino)
		delete(t.dirty, e)
	}
}

// setDirtyLocked records whether d has changes to commit. Caller holds
// d.mu and t.mu.
func (t *Tree) setDirtyLocked(e *Entry, d *fileData, dirty bool) {
	d.dirty = dirty
	if dirty && t.currentLocked(e) {
		t.dirty[e] = struct{}{}
	} else {
		delete(t.dirty, e)
	}
}

// withData runs fn with t.nsMu held shared and e's fileData, if it has
// one, locked.
func (t *Tree) withData(e *Entry, fn func(d *fileData)) {
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	t.mu.Lock()
	d := e.data
	t.mu.Unlock()
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fn(d)
}

// commit writes e's buffered changes to the vault in one transaction.
func (t *Tree) commit(ctx context.Context, e *Entry) (err error) {
	t.withData(e, func(d *fileData) {
		if err = t.commitLocked(ctx, e, d, nil); err != nil {
			return
		}
		t.mu.Lock()
		queued := e.queued
		t.mu.Unlock()
		if queued {
			// Created and closed (or synced) with nothing written:
			// the create itself must be in the vault now, as it was
			// before the close returned when creates were not queued.
			err = t.flushHeld(ctx)
		}
	})
	return err
}

// commitLater is the close of a file in a vault without quotas, with
// Options.QueueCloses: nothing in the vault can refuse its buffered
// changes (a file's size is checked against the store's limit as it is
// written), so they are queued like a create or a rename, a snapshot
// taken from the buffer, and reach the vault with the next transaction or
// within the queue's delay. A burst of small files (cp -r, git's objects)
// then costs a transaction per burst, not per file. It reports false,
// having done nothing, when the vault has a quota: the caller commits at
// once, so that close(2) reports a refusal.
func (t *Tree) commitLater(e *Entry) bool {
	if !t.noQuota.Load() {
		return false
	}
	t.mu.Lock()
	backed := e.data != nil && e.data.backingFile != nil
	t.mu.Unlock()
	if backed {
		return false // its content is in its backing file, not the buffer
	}
	queued := true
	t.withData(e, func(d *fileData) { queued = t.queueContentLocked(e, d) })
	return queued
}

// queueContentLocked queues d's buffered changes for commitLater; false
// if e has no path. Caller holds t.nsMu (shared) and d.mu.
func (t *Tree) queueContentLocked(e *Entry, d *fileData) bool {
	if !d.dirty || d.orphan || d.stale {
		return true
	}
	p, errno := t.path(e)
	if errno != 0 {
		return false
	}
	// The file keeps the times the kernel was shown: its last write's
	// as its modification time, and as its change time that of a
	// change answered since (a link, a chmod: the kernel may send this
	// close late), whose queued op records the same; the close itself
	// changes neither.
	mtime, ctime := t.shownTimes(e)
	snap := &fileData{size: d.size, base: d.base, vsize: d.vsize, exts: d.exts}
	t.q.mu.Lock()
	attached := false
	if d.whole() && !timesSetAfterCreate(t.q.ops, e) {
		for i := range t.q.ops {
			if op := &t.q.ops[i]; op.op == opCreate && op.e == e && op.data == nil && op.takesContent() {
				// Created with this content: at the time the
				// kernel was shown for the create, the file
				// itself at its last write's (as a commit of a
				// fresh file is).
				op.data, op.modified, attached = d.exts[0].data, mtime, true
				break
			}
		}
	}
	t.q.mu.Unlock()
	if !attached {
		t.enqueue(change{op: opContent, from: p, at: ctime, modified: mtime, content: snap})
	}
	t.committedLocked(e, d, mtime, ctime)
	return true
}

// commitLocked writes d's buffered changes (d may be nil) and then runs
// extra in the same transaction. A failed commit drops the buffered
// changes: the vault keeps the previous content, and so does the mount.
// Caller holds t.nsMu (shared) and d.mu.
func (t *Tree) commitLocked(ctx context.Context, e *Entry, d *fileData, extra func(tx *vault.Tx, p string) error) error {
	if d != nil && d.backingFile != nil && !d.orphan && !d.stale {
		return t.commitBackedLocked(ctx, e, d, extra)
	}
	content := d != nil && d.dirty && !d.orphan && !d.stale
	if !content && extra == nil {
		return nil
	}
	p, errno := t.path(e)
	if errno != 0 {
		return errno
	}
	// The content keeps the times the kernel was shown for it: a
	// commit moves neither.
	var mtime, ctime time.Time
	var f fresh
	if content {
		mtime, ctime = t.shownTimes(e)
		if d.whole() {
			// A new file written from the start, as most are: if
			// its create is still queued, it is made with this
			// content.
			f = fresh{e: e, data: d.exts[0].data, modified: mtime}
		}
	}
	contentErr := false
	err := t.updateFresh(ctx, f, func(tx *vault.Tx, wrote time.Time) error {
		if content && wrote.IsZero() {
			if err := tx.AtTimes(ctime, mtime, func() error { return d.apply(tx, p) }); err != nil {
				contentErr = true
				return err
			}
		}
		if extra != nil {
			return extra(tx, p)
		}
		return nil
	})
	if err != nil {
		if contentErr {
			t.discardLocked(e, d)
		}
		return fmt.Errorf("commit %s: %w", p, err)
	}
	if content {
		t.committedLocked(e, d, mtime, ctime)
	}
	return nil
}

// shownTimes returns the modification and change times the kernel was
// shown for file e with buffered writes: its last write's, and the
// change time of a change answered since (a link, a chmod), whose queued
// op records the same.
func (t *Tree) shownTimes(e *Entry) (mtime, ctime time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Unix(0, e.mtime), time.Unix(0, max(e.mtime, e.ctime))
}

// committedLocked records that d's buffered changes are the file's
// content, committed or queued with modification time mtime and change
// time ctime: they are cached, the buffer is empty, and the kernel learns
// the times the vault records. Caller holds d.mu.
func (t *Tree) committedLocked(e *Entry, d *fileData, mtime, ctime time.Time) {
	t.mu.Lock()
	if data := d.contentAfter(t.cachedLocked(e)); data != nil {
		t.cacheLocked(e, data)
	} else {
		t.uncacheLocked(e)
	}
	t.mu.Unlock()
	t.account(d, func() { d.committed(mtime.UnixNano(), ctime.UnixNano()) })
	t.mu.Lock()
	e.size = d.size
	moved := e.mtime != mtime.UnixNano() || e.ctime != ctime.UnixNano()
	e.mtime, e.ctime = mtime.UnixNano(), ctime.UnixNano()
	t.setDirtyLocked(e, d, false)
	shown := d.shown && moved
	d.shown = false
	t.mu.Unlock()
	if shown {
		// The kernel may cache the mtime of the last write; the vault
		// recorded the commit's.
		t.kernel.Changed(e.ino, -1, 0)
	}
}

// discardLocked drops d's buffered changes and makes the kernel drop the
// pages and attributes it got from them. Caller holds d.mu.
func (t *Tree) discardLocked(e *Entry, d *fileData) {
	t.account(d, d.revert)
	t.mu.Lock()
	e.dropCache = true
	e.size = d.size
	e.mtime, e.ctime = d.vmtime, d.vctime
	t.setDirtyLocked(e, d, false)
	t.mu.Unlock()
	t.kernel.Changed(e.ino, 0, 0)
}

// apply replays the buffered changes through tx: a cut below the committed
// size, the writes, then a final extension. Each write rewrites only the
// chunks it touches.
func (d *fileData) apply(tx *vault.Tx, p string) error {
	cur := d.vsize
	if d.base < cur {
		if err := tx.Truncate(p, d.base); err != nil {
			return err
		}
		cur = d.base
	}
	for i := range d.exts {
		x := &d.exts[i]
		if _, err := tx.WriteAt(p, x.off, x.data); err != nil {
			return err
		}
		cur = max(cur, x.end())
	}
	if d.size != cur {
		return tx.Truncate(p, d.size)
	}
	return nil
}

// maxBuffered bounds the writes buffered in all files together, in
// multiples of MaxDirty: past it, each write commits its file.
const maxBuffered = 4

// account runs fn, which changes d's buffered bytes, and counts the
// change in t.buffered. Caller holds d.mu.
func (t *Tree) account(d *fileData, fn func()) {
	before := d.dirtyBytes
	fn()
	t.buffered.Add(d.dirtyBytes - before)
}

// write buffers data at off of the file behind h, committing early when
// its buffer grows past MaxDirty, or all files' past maxBuffered times
// that. An unlinked file's writes, which go nowhere, fail with ENOSPC
// past MaxOrphan.
func (t *Tree) write(ctx context.Context, h *File, data []byte, off int64) syscall.Errno {
	if t.ro {
		return syscall.EROFS
	}
	e, d := h.e, h.d
	d.mu.Lock()
	if d.stale {
		d.mu.Unlock()
		return syscall.ESTALE
	}
	if d.backingFile != nil {
		errno := t.writeBackedLocked(ctx, e, d, data, off)
		d.mu.Unlock()
		return errno
	}
	if errno := t.checkFileSize(ctx, d, off+int64(len(data))); errno != 0 {
		// Refuse the whole session's changes, not just this write:
		// what the file held before stays, as when a commit fails.
		t.discardLocked(e, d)
		d.mu.Unlock()
		return errno
	}
	if d.orphan && d.dirtyBytes+int64(len(data)) > MaxOrphan {
		// Its writes go nowhere but memory: bounded like its content.
		d.mu.Unlock()
		return syscall.ENOSPC
	}
	t.account(d, func() { d.write(off, data, t.maxDirty+int64(len(data))) })
	now := time.Now().UnixNano()
	t.mu.Lock()
	e.size = d.size
	e.mtime, e.ctime = now, now
	t.setDirtyLocked(e, d, !d.orphan)
	t.mu.Unlock()
	over := !d.orphan && (d.dirtyBytes > t.maxDirty || t.buffered.Load() > maxBuffered*t.maxDirty)
	d.mu.Unlock()
	if over {
		if err := t.commit(ctx, e); err != nil {
			return t.errno("write", "", err)
		}
	}
	return 0
}

// read fills dest from the file behind h at off.
func (t *Tree) read(ctx context.Context, h *File, dest []byte, off int64) (int, syscall.Errno) {
	e, d := h.e, h.d
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stale {
		return 0, syscall.ESTALE
	}
	if d.backingFile != nil {
		n, err := readBacked(d, dest, off)
		if err != nil {
			return 0, t.errno("read backing file", "", err)
		}
		return n, 0
	}
	n, err := d.read(dest, off, func(buf []byte, at int64) (int, error) {
		if d.orphan {
			if d.orphanData == nil {
				return 0, syscall.EIO
			}
			return copy(buf, d.orphanData[min(at, int64(len(d.orphanData))):]), nil
		}
		return t.fetch(ctx, e, d, buf, at)
	})
	if err != nil {
		return 0, t.errno("read", "", err)
	}
	if !d.orphan && !t.ro {
		t.accessed(e)
	}
	return n, 0
}

// accessed records a read of e: its access time moves to now when
// relatime says so, queued like any attribute change. Caller holds
// t.nsMu (shared).
func (t *Tree) accessed(e *Entry) {
	now := time.Now()
	t.mu.Lock()
	update := vault.Relatime(time.Unix(0, e.atime), time.Unix(0, e.mtime), time.Unix(0, e.ctime), now)
	if update {
		e.atime = now.UnixNano()
	}
	p, ok := t.pathLocked(e)
	t.mu.Unlock()
	if update && ok {
		t.enqueue(change{op: opSetattr, from: p, attrs: vault.Attrs{Atime: &now, Accessed: true}, at: now})
	}
}

// fetch reads committed content of e for a read: from the content cache,
// else a small file whole (and into the cache), else just the range.
// Caller holds t.nsMu (shared) and d.mu.
func (t *Tree) fetch(ctx context.Context, e *Entry, d *fileData, buf []byte, at int64) (int, error) {
	t.mu.Lock()
	c := t.cachedLocked(e)
	caching := t.cache.max > 0 && d.vsize <= min(t.cache.max, maxCachedFile)
	t.mu.Unlock()
	if c != nil {
		return copy(buf, c[min(at, int64(len(c))):]), nil
	}
	p, errno := t.path(e)
	if errno != 0 {
		return 0, errno
	}
	if err := t.flushForRead(ctx); err != nil {
		return 0, err
	}
	if !caching {
		return t.v.ReadAt(ctx, p, at, buf)
	}
	if data := t.readAhead(ctx, e, d); data != nil {
		return copy(buf, data[min(at, int64(len(data))):]), nil
	}
	data, _, err := t.v.ReadFile(ctx, p)
	if err != nil {
		return 0, err
	}
	if int64(len(data)) == d.vsize {
		t.mu.Lock()
		t.cacheLocked(e, data)
		t.mu.Unlock()
	}
	return copy(buf, data[min(at, int64(len(data))):]), nil
}

const (
	// readAheadFiles is how many files of a directory one read ahead
	// reads (Vault.ReadSmall), and readAheadSize the largest it reads.
	readAheadFiles = 64
	readAheadSize  = 32 << 10
)

// readAhead reads the committed content of small file e together with
// that of the next small files of its directory, in name order, which
// it caches (contentCache), and returns e's; nil if e was not among
// them. A cold read of a tree (cat, grep -r, git add, a build) then
// costs one vault query per directory, not one per file. It starts at
// the second file read from the vault in a directory, so that reading
// one file reads no others. Caller holds t.nsMu (shared) and d.mu.
func (t *Tree) readAhead(ctx context.Context, e *Entry, d *fileData) []byte {
	t.mu.Lock()
	dir, name := e.parent, e.name
	ok := dir != nil && len(e.links) == 0 && d.vsize <= readAheadSize
	if ok {
		dir.fetches++
		ok = dir.fetches > 1
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	dp, errno := t.path(dir)
	if errno != 0 {
		return nil
	}
	files, err := t.v.ReadSmall(ctx, dp, name, readAheadFiles, readAheadSize)
	if err != nil {
		return nil // the read by path says what is wrong
	}
	var own []byte
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range files {
		c := dir.children[f.Name]
		if c == nil || c.ino != f.Ino || c.stale || len(c.links) > 0 || c.cached != nil ||
			c.size != f.Size || c.mtime != f.Mtime.UnixNano() || c.ctime != f.Ctime.UnixNano() {
			// Not the file the tree shows (changed since, by the
			// mount or behind its back), or cached already.
			continue
		}
		if c == e {
			if int64(len(f.Data)) == d.vsize {
				own = f.Data
				t.cacheLocked(e, f.Data)
			}
			continue
		}
		if c.data != nil && c.data.dirty {
			continue // its size and times are its buffer's
		}
		t.cacheLocked(c, f.Data)
	}
	return own
}

// truncate sets the size of file e. Through a descriptor (ftruncate,
// O_TRUNC) the cut is buffered like a write; truncate(2) by path commits
// at once, with whatever else the file has buffered.
func (t *Tree) truncate(ctx context.Context, e *Entry, size int64, byPath bool) syscall.Errno {
	switch {
	case t.ro:
		return syscall.EROFS
	case e.kind == vault.KindDir:
		return syscall.EISDIR
	case e.kind != vault.KindFile:
		return syscall.EINVAL
	}
	d := t.acquire(e)
	defer t.release(e, d)
	d.mu.Lock()
	if d.stale {
		d.mu.Unlock()
		return syscall.ESTALE
	}
	if d.backingFile != nil {
		errno := t.truncateBackedLocked(ctx, e, d, size, false)
		d.mu.Unlock()
		if errno == 0 && byPath {
			if err := t.commit(ctx, e); err != nil {
				return t.errno("truncate", "", err)
			}
		}
		return errno
	}
	if errno := t.checkFileSize(ctx, d, size); errno != 0 {
		d.mu.Unlock()
		return errno
	}
	var changed bool
	t.account(d, func() { changed = d.truncate(size) })
	if changed {
		now := time.Now().UnixNano()
		t.mu.Lock()
		e.size = size
		e.mtime, e.ctime = now, now
		t.setDirtyLocked(e, d, !d.orphan)
		t.mu.Unlock()
	}
	d.mu.Unlock()
	if changed && byPath {
		if err := t.commit(ctx, e); err != nil {
			return t.errno("truncate", "", err)
		}
	}
	return 0
}

// SetAttr applies chmod, chown, utimens (a) and truncate (size, if not
// nil), then renders e's attributes into out. The kernel has checked the
// caller's rights (default_permissions), and sends the mode that a chown
// or a write by another user leaves as a mode change. byPath is a change
// by name (truncate(2)), which commits at once, rather than through a
// descriptor.
func (t *Tree) SetAttr(ctx context.Context, e *Entry, byPath bool, size *int64, a vault.Attrs, out *Attr) syscall.Errno {
	if t.ro {
		return syscall.EROFS
	}
	if size != nil {
		if errno := t.truncate(ctx, e, *size, byPath); errno != 0 {
			return errno
		}
	}
	if a != (vault.Attrs{}) {
		if errno := t.chattr(ctx, e, a); errno != 0 {
			return errno
		}
	}
	return t.attr(ctx, e, out)
}

// chattr changes mode, owner and/or times. Of a file with buffered
// writes, the writes are committed first, in the same transaction, so
// that the commit cannot overwrite a new mtime (cp -p sets times before
// it closes). Anything else is queued: it cannot fail once the entry
// exists.
func (t *Tree) chattr(ctx context.Context, e *Entry, a vault.Attrs) syscall.Errno {
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	t.mu.Lock()
	d := e.data
	t.mu.Unlock()
	if d != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
	}
	if d == nil || !d.dirty || d.orphan || d.stale || a.Mtime == nil {
		t.mu.Lock()
		tmp := e.tmp
		t.mu.Unlock()
		if t.queueCloses || tmp || d != nil && (d.orphan || d.stale) {
			return t.chattrQueued(e, d, a)
		}
		if d == nil || !d.dirty {
			return t.chattrNow(ctx, e, d, a)
		}
	}
	var res vault.Entry
	err := t.commitLocked(ctx, e, d, func(tx *vault.Tx, p string) error {
		var err error
		res, err = tx.SetAttrs(p, a)
		return err
	})
	if err != nil {
		return t.errno("setattr", "", err)
	}
	d.vmtime, d.vctime = res.Mtime.UnixNano(), res.Ctime.UnixNano()
	t.mu.Lock()
	e.refresh(res)
	t.mu.Unlock()
	return 0
}

// chattrNow commits a change of the attributes of a file with nothing
// buffered before it is answered, as a mount that does not queue
// (Options.QueueCloses off) does with every change. Caller holds t.nsMu
// (shared) and d.mu if d is not nil.
func (t *Tree) chattrNow(ctx context.Context, e *Entry, d *fileData, a vault.Attrs) syscall.Errno {
	p, errno := t.path(e)
	if errno != 0 {
		return errno
	}
	var res vault.Entry
	err := t.update(ctx, func(tx *vault.Tx) error {
		var err error
		res, err = tx.SetAttrs(p, a)
		return err
	})
	if err != nil {
		return t.errno("setattr", p, err)
	}
	if d != nil {
		d.vmtime, d.vctime = res.Mtime.UnixNano(), res.Ctime.UnixNano()
	}
	t.mu.Lock()
	e.refresh(res)
	t.mu.Unlock()
	return 0
}

// chattrQueued records a change of attributes and queues it. Caller
// holds t.nsMu (shared: no rename can change the path before the change
// is queued) and d.mu if d is not nil.
func (t *Tree) chattrQueued(e *Entry, d *fileData, a vault.Attrs) syscall.Errno {
	t.mu.Lock()
	tmp := e.tmp
	t.mu.Unlock()
	at := time.Now()
	if !tmp { // an O_TMPFILE file's attributes reach the vault with its link
		p, errno := t.path(e)
		if errno != 0 {
			return errno
		}
		t.enqueue(change{op: opSetattr, from: p, attrs: a, at: at})
	}
	now := at.UnixNano()
	if d != nil && a.Mtime != nil {
		d.vmtime = a.Mtime.UnixNano() // what a failed commit goes back to
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The same changes, in the same order, as Tx.SetAttrs makes.
	if a.Uid != nil || a.Gid != nil {
		if a.Uid != nil {
			e.uid = *a.Uid
		}
		if a.Gid != nil {
			e.gid = *a.Gid
		}
		e.mode = vault.ModeBits(vault.ChownedMode(e.kind, vault.FileMode(e.mode)))
	}
	if a.Mode != nil {
		e.mode = vault.ModeBits(*a.Mode)
	}
	if a.Mtime != nil {
		e.mtime = a.Mtime.UnixNano()
	}
	if a.Atime != nil {
		e.atime = a.Atime.UnixNano()
	}
	e.ctime = now
	return 0
}
