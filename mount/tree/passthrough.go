package tree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/vault"
)

// A backed file's backing file is private to it (decisions §32): checked
// out of the Backing (renamed out of the cache) at the first backed open,
// checked back in (renamed to the key of the content it then holds) when
// the last backed File closes. While checked out it is the file's
// content: the kernel reads and writes it directly through every open of
// the file (the kernel requires them all to use it), and the tree reads,
// writes, truncates and seeks it too, and copies it into the vault at
// flush, fsync and release (commitBackedLocked). A change made in the
// vault by someone else is copied into it (refillBacked), so every
// descriptor reads current bytes, as on a local disk.

// privPrefix names checked-out backing files in the cache directory. Each
// is held locked (flock) by the process that checked it out, so that
// OpenBacking removes only those of dead processes.
const privPrefix = "priv-"

var privSeq atomic.Int64

// checkout opens the file of key (filling it as open does) and takes it
// out of the cache: renamed to a private name, no longer found by key, so
// that writes to it reach no other file. It returns the file, opened
// read-write, and its private path.
func (b *Backing) checkout(key string, size int64, fill func(w io.Writer) error) (*os.File, string, error) {
	for range 3 {
		f, err := b.open(key, size, fill)
		if err != nil {
			return nil, "", err
		}
		f.Close()
		p := filepath.Join(b.dir, key)
		priv := filepath.Join(b.dir, privPrefix+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(privSeq.Add(1), 10))
		b.mu.Lock()
		err = os.Rename(p, priv)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			b.forgetLocked(key)
		}
		b.mu.Unlock()
		if errors.Is(err, os.ErrNotExist) {
			continue // checked out by another process meanwhile: fill again
		}
		if err != nil {
			return nil, "", fmt.Errorf("content cache: %w", err)
		}
		w, err := os.OpenFile(priv, os.O_RDWR, 0)
		if err == nil {
			err = w.Chmod(0o600)
		}
		if err == nil {
			err = unix.Flock(int(w.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		}
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(int(w.Fd()), &st); err == nil && st.Size != size {
				err = fmt.Errorf("content cache: %s changed while checked out", key)
			}
		}
		if err != nil {
			if w != nil {
				w.Close()
			}
			os.Remove(priv)
			return nil, "", fmt.Errorf("content cache: %w", err)
		}
		return w, priv, nil
	}
	return nil, "", fmt.Errorf("content cache: %s keeps changing", key)
}

// checkin puts a checked-out file back in the cache as the file of key,
// which must be the content it holds, or removes it if key is "" (its
// content is not known to be any key's) or the cache has the key again.
// It closes f.
func (b *Backing) checkin(f *os.File, priv, key string) {
	defer f.Close()
	if key == "" || !validKey(key) {
		os.Remove(priv)
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		os.Remove(priv)
		return
	}
	f.Chmod(0o400)
	p := filepath.Join(b.dir, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.files[key]; ok || b.fills[key] != nil {
		os.Remove(priv)
		return
	}
	if err := unix.Renameat2(unix.AT_FDCWD, priv, unix.AT_FDCWD, p, unix.RENAME_NOREPLACE); err != nil {
		os.Remove(priv) // present already (another process), or gone
		return
	}
	b.files[key] = b.lru.PushFront(&backingFile{key: key, size: st.Size})
	b.total += st.Size
	b.evictLocked()
}

// removeDeadPrivate removes the checked-out files of processes that are
// gone: nobody holds their lock.
func removeDeadPrivate(p string) {
	f, err := os.Open(p)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		os.Remove(p)
	}
}

// stamp is what fstat says of a backing file's content: a write through
// the kernel changes its ctime (a fine-grained one once it was looked at,
// Linux 6.13+ multigrain timestamps), so an unchanged stamp means
// unchanged content.
type stamp struct{ size, mtime, ctime int64 }

func stampOf(f *os.File) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, err
	}
	return stamp{st.Size, st.Mtim.Nano(), st.Ctim.Nano()}, nil
}

// backedAttrLocked renders the attributes a changed backing file gives
// its entry: its size and times. Caller holds t.mu.
func backedAttrLocked(e *Entry, a *Attr) {
	d := e.data
	if d == nil || d.backingFile == nil {
		return
	}
	s, err := stampOf(d.backingFile)
	if err != nil || s == d.backingSync {
		return
	}
	e.size = s.size
	a.Size, a.Blocks = uint64(s.size), (uint64(s.size)+511)/512
	a.Mtime, a.Ctime = s.mtime, s.ctime
}

// readBacked reads a backed file's content. Caller holds d.mu.
func readBacked(d *fileData, dest []byte, off int64) (int, error) {
	n, err := d.backingFile.ReadAt(dest, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// changedBackedLocked records a change made to the backing file of e
// through the tree: its size is now size. Caller holds d.mu.
func (t *Tree) changedBackedLocked(e *Entry, d *fileData, size int64) {
	now := time.Now().UnixNano()
	d.size = size
	t.mu.Lock()
	e.size = size
	e.mtime, e.ctime = now, now
	t.setDirtyLocked(e, d, !d.orphan)
	t.mu.Unlock()
}

// writeBackedLocked writes data at off into the backing file. Caller
// holds d.mu.
func (t *Tree) writeBackedLocked(ctx context.Context, e *Entry, d *fileData, data []byte, off int64) syscall.Errno {
	if errno := t.checkFileSize(ctx, d, off+int64(len(data))); errno != 0 {
		return errno
	}
	if _, err := d.backingFile.WriteAt(data, off); err != nil {
		return t.errno("write backing file", "", err)
	}
	s, err := stampOf(d.backingFile)
	if err != nil {
		return t.errno("write backing file", "", err)
	}
	t.changedBackedLocked(e, d, s.size)
	return 0
}

// truncateBackedLocked sets the backing file's size; with grow, only
// makes it at least size (fallocate). Caller holds d.mu.
func (t *Tree) truncateBackedLocked(ctx context.Context, e *Entry, d *fileData, size int64, grow bool) syscall.Errno {
	if errno := t.checkFileSize(ctx, d, size); errno != 0 {
		return errno
	}
	if grow {
		s, err := stampOf(d.backingFile)
		if err != nil {
			return t.errno("truncate backing file", "", err)
		}
		if s.size >= size {
			return 0
		}
	}
	if err := d.backingFile.Truncate(size); err != nil {
		return t.errno("truncate backing file", "", err)
	}
	t.changedBackedLocked(e, d, size)
	return 0
}

// backedData returns e's fileData, locked, if it has a backing file; nil
// (nothing locked) if not. Caller holds t.nsMu (shared).
func (t *Tree) backedData(e *Entry) *fileData {
	t.mu.Lock()
	d := e.data
	t.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	if d.backingFile == nil || d.stale {
		d.mu.Unlock()
		return nil
	}
	return d
}

// extendBacked is Extend of a backed file: ok is false if e has no
// backing file.
func (t *Tree) extendBacked(ctx context.Context, e *Entry, end int64, byPath bool) (errno syscall.Errno, ok bool) {
	t.nsMu.RLock()
	d := t.backedData(e)
	if d == nil {
		t.nsMu.RUnlock()
		return 0, false
	}
	errno = t.truncateBackedLocked(ctx, e, d, end, true)
	d.mu.Unlock()
	t.nsMu.RUnlock()
	if errno == 0 && byPath {
		if err := t.commit(ctx, e); err != nil {
			return t.errno("fallocate", "", err), true
		}
	}
	return errno, true
}

// seekBacked is Seek of a backed file, answered by the backing file:
// ok is false if e has none.
func (t *Tree) seekBacked(e *Entry, off int64, hole bool) (at int64, errno syscall.Errno, ok bool) {
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	d := t.backedData(e)
	if d == nil {
		return 0, 0, false
	}
	defer d.mu.Unlock()
	whence := unix.SEEK_DATA
	if hole {
		whence = unix.SEEK_HOLE
	}
	at, err := unix.Seek(int(d.backingFile.Fd()), off, whence)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return 0, syscall.ENXIO, true
		}
		return 0, t.errno("lseek backing file", "", err), true
	}
	return at, 0, true
}

// commitBackedLocked is commitLocked of a backed file: the backing file
// is its content, copied into the vault when it changed since it last
// matched the vault, then extra runs in the same transaction. The content
// key the vault gives the new content becomes the backing file's, so the
// next backed open of it (here or in a fork) needs no copy. Caller holds
// t.nsMu (shared) and d.mu.
func (t *Tree) commitBackedLocked(ctx context.Context, e *Entry, d *fileData, extra func(tx *vault.Tx, p string) error) error {
	// Looked at even when not dirty: a shared mapping may have written
	// it after its descriptor's last flush.
	s, err := stampOf(d.backingFile)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	content := s != d.backingSync
	if !content && d.dirty && d.backingWriters == 0 {
		t.mu.Lock()
		t.setDirtyLocked(e, d, false)
		t.mu.Unlock()
	}
	if !content && extra == nil {
		return nil
	}
	p, errno := t.path(e)
	if errno != 0 {
		return errno
	}
	var now time.Time
	var key string
	err = t.update(ctx, func(tx *vault.Tx) error {
		now = tx.Time()
		if content {
			if err := importBacking(tx, p, d.backingFile, s.size); err != nil {
				return err
			}
			k, _, err := tx.ContentKey(p)
			if err != nil {
				return err
			}
			key = k
		}
		if extra != nil {
			return extra(tx, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit %s: %w", p, err)
	}
	if content {
		d.size, d.base, d.vsize = s.size, s.size, s.size
		d.backedKey = key
		t.mu.Lock()
		d.backingSync = s
		t.uncacheLocked(e)
		t.mu.Unlock()
		t.committedLocked(e, d, now, now)
		t.mu.Lock()
		e.key, e.keySize, e.keyMtime, e.keyCtime = key, s.size, e.mtime, e.ctime
		if d.backingWriters > 0 {
			t.setDirtyLocked(e, d, true) // more may come, unseen
		}
		t.mu.Unlock()
	}
	return nil
}

// importBacking makes the vault file p hold f's first size bytes: cut to
// nothing, the pieces that are not all zeros written, then extended to
// size (the rest are holes, as in f).
func importBacking(tx *vault.Tx, p string, f *os.File, size int64) error {
	if err := tx.Truncate(p, 0); err != nil {
		return err
	}
	buf := make([]byte, min(size, fillPiece))
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read backing file: %w", err)
		}
		if !allZero(buf[:n]) {
			if _, err := tx.WriteAt(p, off, buf[:n]); err != nil {
				return err
			}
		}
		off += int64(n)
	}
	return tx.Truncate(p, size)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// refillBacked copies the vault's content of e into its backing file,
// after a change made in the vault by someone else: every descriptor of
// the file reads the new bytes. A backing file with changes of the
// mount's own keeps them (they win when committed, as buffered writes
// do).
func (t *Tree) refillBacked(ctx context.Context, e *Entry) {
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	d := t.backedData(e)
	if d == nil {
		return
	}
	defer d.mu.Unlock()
	if d.dirty || d.orphan {
		return
	}
	p, errno := t.path(e)
	if errno != 0 {
		return
	}
	f := d.backingFile
	err := t.v.View(ctx, func(tx *vault.Tx) error {
		key, ve, err := tx.ContentKey(p)
		if err != nil {
			return err
		}
		if ve.Ino != e.ino {
			return errStaleKey
		}
		if key == d.backedKey {
			return nil
		}
		if err := f.Truncate(ve.Size); err != nil {
			return err
		}
		buf := make([]byte, min(ve.Size, fillPiece))
		for off := int64(0); off < ve.Size; {
			n, err := tx.ReadAt(p, off, buf)
			if n == 0 && err == nil {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return err
			}
			if allZero(buf[:n]) && unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, int64(n)) == nil {
				off += int64(n)
				continue
			}
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
		}
		s, err := stampOf(f)
		if err != nil {
			return err
		}
		d.size, d.base, d.vsize = ve.Size, ve.Size, ve.Size
		d.backedKey = key
		t.mu.Lock()
		d.backingSync = s
		e.key, e.keySize, e.keyMtime, e.keyCtime = key, ve.Size, ve.Mtime.UnixNano(), ve.Ctime.UnixNano()
		t.mu.Unlock()
		return nil
	})
	if err != nil {
		// The backing file may now hold anything: it goes back to the
		// cache as no key's.
		t.log.Warn("refill backing file", keyPath, p, keyErr, err)
		d.backedKey = ""
	}
}
