package tree

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/avfs/avfs/vault"
)

// Backing is a cache of clean file content kept as read-only files, one
// per content key (vault.Tx.ContentKey), in one directory shared by every
// tree of a store: every vault and fork, every process. A FUSE mount
// hands such a file to the kernel, which then serves reads of the open
// file from it directly (passthrough), without a request per read.
//
// It fills lazily: a file is written when a tree first opens content
// that is not there, read from the vault in the transaction that names
// its key, so a file never holds other bytes than its key says. Forks
// cost nothing here. It holds at most its bound, evicting the least
// recently used files (the order of use within a process; across
// processes, the files' modification times at OpenBacking). A file is
// written under a temporary name and renamed into place complete; one
// cut short by a crash (its size is not the content's) is written again.
// Files are not synced to disk: the cache is rebuilt from the vault at
// will.
type Backing struct {
	dir string
	max int64

	mu    sync.Mutex
	files map[string]*list.Element // by key; values *backingFile
	lru   *list.List               // front: most recently used
	total int64                    // bytes of files in lru
	fills map[string]*backingFill  // keys being written
}

type backingFile struct {
	key  string
	size int64
}

type backingFill struct {
	done chan struct{}
	err  error
}

// maxBackedShare: a file larger than the cache's bound divided by it is
// never backed (nor copied into the cache).
const maxBackedShare = 4

// backs reports whether a file of size bytes gets a backing file.
func (b *Backing) backs(size int64) bool { return size >= MinBacked && size <= b.max/maxBackedShare }

// MinBacked is the smallest file given a backing file. A backed open
// costs a vault transaction (the content key), the first one a copy of
// the content into the cache, and two more kernel round trips (register
// and unregister the backing file); a small file's one READ from the
// tree's in-memory cache or the vault is cheaper (git add of 2,000
// source files went from 8.6 s to 16.6 s with every file backed,
// BENCHMARKS.md).
const MinBacked = 1 << 20

// DefaultBackingBytes bounds a Backing when no bound is configured.
const DefaultBackingBytes = 4 << 30

// OpenBacking opens (creating it) the cache directory dir, bounded to
// maxBytes (DefaultBackingBytes if zero or less). Files left there by
// earlier processes are kept, oldest first out; unfinished ones are
// removed.
func OpenBacking(dir string, maxBytes int64) (*Backing, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultBackingBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("content cache: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("content cache: %w", err)
	}
	type old struct {
		key   string
		size  int64
		mtime int64
	}
	var olds []old
	for _, de := range ents {
		name := de.Name()
		if strings.HasPrefix(name, "tmp-") {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		if strings.HasPrefix(name, privPrefix) {
			removeDeadPrivate(filepath.Join(dir, name))
			continue
		}
		if !validKey(name) || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		olds = append(olds, old{name, fi.Size(), fi.ModTime().UnixNano()})
	}
	sort.Slice(olds, func(i, j int) bool { return olds[i].mtime < olds[j].mtime })
	b := &Backing{dir: dir, max: maxBytes, files: map[string]*list.Element{}, lru: list.New(), fills: map[string]*backingFill{}}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range olds {
		b.files[o.key] = b.lru.PushFront(&backingFile{key: o.key, size: o.size})
		b.total += o.size
	}
	b.evictLocked()
	return b, nil
}

// validKey reports whether name is a content key (hex SHA-256).
func validKey(name string) bool {
	if len(name) != 64 {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Dir is the cache directory.
func (b *Backing) Dir() string { return b.dir }

// Bytes is how many bytes the cache holds.
func (b *Backing) Bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// evictLocked removes least recently used files until the cache fits
// its bound. A file still open (by a kernel reading through it) stays
// readable until closed. Caller holds b.mu.
func (b *Backing) evictLocked() {
	for b.total > b.max && b.lru.Len() > 0 {
		el := b.lru.Back()
		f := el.Value.(*backingFile)
		b.lru.Remove(el)
		delete(b.files, f.key)
		b.total -= f.size
		os.Remove(filepath.Join(b.dir, f.key))
	}
}

// forgetLocked drops key from the index. Caller holds b.mu.
func (b *Backing) forgetLocked(key string) {
	if el, ok := b.files[key]; ok {
		b.total -= el.Value.(*backingFile).size
		b.lru.Remove(el)
		delete(b.files, key)
	}
}

// errNoFill: the content is not cached and the caller gave no way to
// fill it.
var errNoFill = errors.New("content not cached")

// open returns the file of key, whose content is size bytes, opened
// read-only. When it is missing, fill writes the content to w (exactly
// size bytes) first; a nil fill fails with errNoFill instead. Concurrent
// opens of one missing key wait for one fill.
func (b *Backing) open(key string, size int64, fill func(w io.Writer) error) (*os.File, error) {
	if !validKey(key) {
		return nil, fmt.Errorf("content cache: bad key %q", key)
	}
	p := filepath.Join(b.dir, key)
	for range 3 {
		b.mu.Lock()
		if fl, ok := b.fills[key]; ok {
			b.mu.Unlock()
			<-fl.done
			if fl.err != nil {
				return nil, fl.err
			}
			continue
		}
		if el, ok := b.files[key]; ok {
			b.lru.MoveToFront(el)
		}
		b.mu.Unlock()
		// Present, perhaps written by another process.
		if f, err := os.Open(p); err == nil {
			if fi, err := f.Stat(); err == nil && fi.Size() == size {
				b.mu.Lock()
				if _, ok := b.files[key]; !ok {
					b.files[key] = b.lru.PushFront(&backingFile{key: key, size: size})
					b.total += size
					b.evictLocked()
				}
				b.mu.Unlock()
				return f, nil
			}
			f.Close()
		}
		if fill == nil {
			return nil, errNoFill
		}
		b.mu.Lock()
		if _, ok := b.fills[key]; ok {
			b.mu.Unlock()
			continue
		}
		b.forgetLocked(key) // cut short, or evicted by another process
		fl := &backingFill{done: make(chan struct{})}
		b.fills[key] = fl
		b.mu.Unlock()

		fl.err = b.write(p, size, fill)
		b.mu.Lock()
		delete(b.fills, key)
		if fl.err == nil {
			b.files[key] = b.lru.PushFront(&backingFile{key: key, size: size})
			b.total += size
			b.evictLocked()
		}
		b.mu.Unlock()
		close(fl.done)
		if fl.err != nil {
			return nil, fl.err
		}
	}
	return nil, fmt.Errorf("content cache: %s keeps changing", key)
}

// write fills a temporary file and renames it to p.
func (b *Backing) write(p string, size int64, fill func(w io.Writer) error) error {
	tmp, err := os.CreateTemp(b.dir, "tmp-")
	if err != nil {
		return fmt.Errorf("content cache: %w", err)
	}
	cw := &sparseWriter{f: tmp}
	err = fill(cw)
	if err == nil && cw.n != size {
		err = fmt.Errorf("content cache: wrote %d bytes of %d", cw.n, size)
	}
	if err == nil {
		err = tmp.Truncate(size) // a hole at the end
	}
	if err == nil {
		err = tmp.Chmod(0o400)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// sparseWriter writes to f, leaving a hole where a piece is all zeros:
// a sparse file (the vault keeps holes as runs) costs no disk here
// either.
type sparseWriter struct {
	f *os.File
	n int64
}

func (c *sparseWriter) Write(p []byte) (int, error) {
	zero := true
	for _, b := range p {
		if b != 0 {
			zero = false
			break
		}
	}
	if zero {
		if _, err := c.f.Seek(int64(len(p)), io.SeekCurrent); err != nil {
			return 0, err
		}
		c.n += int64(len(p))
		return len(p), nil
	}
	n, err := c.f.Write(p)
	c.n += int64(n)
	return n, err
}

// fillPiece is how much of a file one read of the vault copies into a
// backing file.
const fillPiece = 1 << 20

// backedLocked checks out a backing file with e's committed content
// (passthrough.go), and returns it and its private path, or nil when
// there is none to give (a vault error, logged: the open is then served
// without one). It sets d.backedKey. Caller holds t.nsMu (shared) and
// d.mu; e is clean and has no other open Files.
func (t *Tree) backedLocked(ctx context.Context, e *Entry, d *fileData) (*os.File, string) {
	t.mu.Lock()
	size, key := e.size, ""
	if e.keySize == size && e.keyMtime == e.mtime && e.keyCtime == e.ctime {
		key = e.key
	}
	mtime, ctime := e.mtime, e.ctime
	t.mu.Unlock()
	if key != "" {
		if f, priv, err := t.backing.checkout(key, size, nil); err == nil {
			d.backedKey = key
			return f, priv
		}
	}
	p, errno := t.path(e)
	if errno != 0 {
		return nil, ""
	}
	if err := t.flushForRead(ctx); err != nil {
		t.log.Warn("commit before a backed open", keyPath, p, keyErr, err)
		return nil, ""
	}
	var f *os.File
	var priv string
	err := t.v.View(ctx, func(tx *vault.Tx) error {
		k, ve, err := tx.ContentKey(p)
		if err != nil {
			return err
		}
		if ve.Ino != e.ino || ve.Size != size {
			return errStaleKey
		}
		key = k
		f, priv, err = t.backing.checkout(key, size, func(w io.Writer) error {
			buf := make([]byte, min(size, fillPiece))
			for off := int64(0); off < size; {
				n, err := tx.ReadAt(p, off, buf)
				if n == 0 && err == nil {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					return err
				}
				if _, err := w.Write(buf[:n]); err != nil {
					return err
				}
				off += int64(n)
			}
			return nil
		})
		return err
	})
	if err != nil {
		if !errors.Is(err, errStaleKey) {
			t.log.Warn("content cache", keyPath, p, keyErr, err)
		}
		return nil, ""
	}
	t.mu.Lock()
	e.key, e.keySize, e.keyMtime, e.keyCtime = key, size, mtime, ctime
	t.mu.Unlock()
	d.backedKey = key
	return f, priv
}

// errStaleKey: the vault's file is not the version the tree holds, or
// not the content other Files are backed by.
var errStaleKey = fmt.Errorf("content changed: %w", syscall.ESTALE)
