package tree

import (
	"container/list"
	"slices"
)

// maxCachedFile is the largest file whose whole content the mount keeps
// in memory. Most files a build or git touches are smaller, and a file
// read or written through the mount is usually read again soon (objects
// git just wrote, outputs the next build step reads). The kernel keeps no
// page for them: a partly written page is never marked up to date.
const maxCachedFile = 1 << 20

// contentCache holds the committed content of small files, least recently
// used first out, within a byte budget. Cached slices are never changed,
// only replaced, so callers may read them without the lock. Guarded by
// Mount.mu.
type contentCache struct {
	max   int64
	bytes int64
	lru   list.List // of *Entry, most recent at the front
}

// cachedLocked returns e's committed content if cached. Caller holds t.mu.
func (t *Tree) cachedLocked(e *Entry) []byte {
	if e.cached == nil {
		return nil
	}
	t.cache.lru.MoveToFront(e.cached)
	return e.content
}

// cacheLocked records data as e's committed content. Caller holds t.mu.
func (t *Tree) cacheLocked(e *Entry, data []byte) {
	t.uncacheLocked(e)
	c := &t.cache
	if int64(len(data)) > min(c.max, maxCachedFile) || !t.currentLocked(e) {
		return
	}
	if data == nil {
		data = []byte{}
	} else if cap(data)-len(data) > 4096 {
		data = slices.Clone(data) // do not pin a buffer grown by appends
	}
	e.content = data
	e.cached = c.lru.PushFront(e)
	c.bytes += int64(len(data))
	for c.bytes > c.max {
		old := c.lru.Back().Value.(*Entry)
		t.uncacheLocked(old)
	}
}

// uncacheLocked forgets e's cached content. Caller holds t.mu.
func (t *Tree) uncacheLocked(e *Entry) {
	if e.cached == nil {
		return
	}
	t.cache.lru.Remove(e.cached)
	t.cache.bytes -= int64(len(e.content))
	e.cached, e.content = nil, nil
}

// contentAfter renders the content d is about to commit, from the cached
// committed content, or returns nil when that costs a vault read or more
// memory than the cache would keep. Caller holds d.mu and t.mu.
func (d *fileData) contentAfter(old []byte) []byte {
	if d.size > maxCachedFile {
		return nil
	}
	if d.base == 0 && len(d.exts) == 1 && d.exts[0].off == 0 && d.exts[0].end() == d.size {
		return d.exts[0].data // rewritten whole: the common case
	}
	if old == nil && d.base > 0 {
		return nil
	}
	out := make([]byte, d.size)
	copy(out, old[:d.base])
	for _, x := range d.exts {
		copy(out[x.off:], x.data)
	}
	return out
}
