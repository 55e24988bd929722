package tree

import "github.com/avfs/avfs/vault"

// maxPrefill is the largest file Prefill hands over: what the kernel's
// first read-ahead of a file asks for (128 KiB), so that an open that
// reads a little of a larger file does not copy all of it.
const maxPrefill = 128 << 10

// Prefill returns the whole content of f, a File just opened for reading
// only, when the mount can hand it to the kernel's page cache with the
// open (FUSE_NOTIFY_STORE) instead of in a READ round trip after it: a
// small file with no buffered changes, no backing file and no other open
// File, whose committed content the content cache holds (read ahead with
// its directory, or read or written before). It returns nil otherwise.
// The read that the content is for never reaches the mount: the caller
// records it with Accessed when the File is closed.
//
// The caller stores data in the kernel and then asks Prefilled whether
// it is still the file's content: a write or a catch-up that landed
// meanwhile means the kernel's pages must be dropped.
func (t *Tree) Prefill(f *File) []byte {
	e, d := f.e, f.d
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.opens != 1 || d.size > maxPrefill || !t.prefillableLocked(e, d) {
		return nil
	}
	return t.cachedLocked(e)
}

// Accessed records a read of f that the mount did not serve (its content
// was prefilled): the access time moves as a READ would have moved it
// (relatime). It reports whether it moved.
func (t *Tree) Accessed(f *File) bool {
	if t.ro {
		return false
	}
	e, d := f.e, f.d
	t.nsMu.RLock()
	defer t.nsMu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.orphan || d.stale {
		return false
	}
	t.mu.Lock()
	before := e.atime
	t.mu.Unlock()
	t.accessed(e)
	t.mu.Lock()
	defer t.mu.Unlock()
	return e.atime != before
}

// Prefilled reports whether data, which Prefill returned for f, is still
// f's content: nothing wrote, truncated or replaced it since.
func (t *Tree) Prefilled(f *File, data []byte) bool {
	e, d := f.e, f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prefillableLocked(e, d) && len(e.content) == len(data) && &e.content[0] == &data[0]
}

// prefillableLocked reports whether the content cache holds all of
// clean, non-empty, unbacked file e, whose open state is d. Caller holds
// d.mu and t.mu.
func (t *Tree) prefillableLocked(e *Entry, d *fileData) bool {
	return e.kind == vault.KindFile && e.data == d && t.currentLocked(e) &&
		!e.unlinked && !e.tmp && !e.stale && !e.dropCache &&
		!d.dirty && !d.orphan && !d.stale && d.backingFile == nil && d.backed == 0 &&
		len(d.exts) == 0 && d.size > 0 && d.size == e.size && d.base == d.size && d.vsize == d.size &&
		e.cached != nil && int64(len(e.content)) == d.size
}
