package tree

import (
	"os"
	"sort"
	"sync"
)

// extent is a run of buffered bytes written at off.
type extent struct {
	off  int64
	data []byte
}

func (x *extent) end() int64 { return x.off + int64(len(x.data)) }

// fileData is the state of one regular file while it is open: the writes
// and truncations not yet committed to the vault, laid over the committed
// content like a page cache. Byte i of the file (i < size) is the last
// buffered write covering i if any, else byte i of the committed content
// if i < base, else zero.
//
// One fileData is shared by every handle of the file, so that two
// descriptors see each other's writes and a commit carries all of them.
type fileData struct {
	// Guarded by Mount.mu.
	opens int  // open handles plus transient users (truncate by path)
	shown bool // the kernel got attributes that the next commit changes
	// backed counts the Files with a backing file (passthrough).
	backed int

	// dirty is written with both mu and Mount.mu held, so either lock
	// is enough to read it.
	dirty bool

	mu         sync.Mutex // guards the fields below
	size       int64      // logical size
	base       int64      // committed content still in the file: [0, base)
	vsize      int64      // size of the committed content in the vault
	vmtime     int64      // committed mtime and ctime, restored by a discard
	vctime     int64
	exts       []extent // buffered writes: sorted, disjoint, not adjacent
	dirtyBytes int64    // total length of exts

	// An unlinked file that is still open keeps its committed content
	// here (orphanData, nil if it was too large to keep) and never
	// commits again.
	orphan     bool
	orphanData []byte

	stale bool // dropped by Invalidate: every access fails

	// While backed > 0: the backing file, checked out of the Backing at
	// backingPath (passthrough.go), which is the file's content; the key
	// of the content it held when it last matched the vault ("" if
	// unknown); its stamp then; how many backed Files may write it, and
	// whether one did.
	// Guarded by mu; backingFile and backingSync are written with
	// Mount.mu held too, so either lock is enough to read them.
	backedKey      string
	backingFile    *os.File
	backingPath    string
	backingSync    stamp
	backingWriters int
	backingWritten bool // a backed File was opened for writing
}

func newFileData(e *Entry) *fileData {
	return &fileData{size: e.size, base: e.size, vsize: e.size, vmtime: e.mtime, vctime: e.ctime}
}

// write buffers data at off. Sequential writes, the common case, extend
// the last extent in place (grow); limit is about the most the file
// buffers before it commits (Options.MaxDirty plus this write).
func (d *fileData) write(off int64, data []byte, limit int64) {
	if len(data) == 0 {
		return // a zero-length write changes nothing, not even the size
	}
	end := off + int64(len(data))
	d.size = max(d.size, end)
	n := len(d.exts)
	if n > 0 {
		last := &d.exts[n-1]
		switch {
		case off == last.end():
			last.grow(len(data), limit)
			last.data = append(last.data, data...)
			d.dirtyBytes += int64(len(data))
			return
		case off >= last.off && end <= last.end():
			copy(last.data[off-last.off:], data)
			return
		case off > last.end():
			d.exts = append(d.exts, extent{off: off, data: clone(data)})
			d.dirtyBytes += int64(len(data))
			return
		}
	}
	// exts[i:j] overlap or touch [off, end).
	i := sort.Search(n, func(k int) bool { return d.exts[k].end() >= off })
	j := sort.Search(n, func(k int) bool { return d.exts[k].off > end })
	if i == j {
		d.exts = append(d.exts, extent{})
		copy(d.exts[i+1:], d.exts[i:])
		d.exts[i] = extent{off: off, data: clone(data)}
		d.dirtyBytes += int64(len(data))
		return
	}
	if j == i+1 && d.exts[i].off <= off && end <= d.exts[i].end() {
		copy(d.exts[i].data[off-d.exts[i].off:], data)
		return
	}
	lo, hi := min(off, d.exts[i].off), max(end, d.exts[j-1].end())
	buf := make([]byte, hi-lo)
	for _, x := range d.exts[i:j] {
		copy(buf[x.off-lo:], x.data)
		d.dirtyBytes -= int64(len(x.data))
	}
	copy(buf[off-lo:], data)
	d.dirtyBytes += hi - lo
	d.exts[i] = extent{off: lo, data: buf}
	d.exts = append(d.exts[:i+1], d.exts[j:]...)
}

// grow makes room for n more bytes at the end of x, doubling its
// capacity, and going straight to limit once a doubling passes half of
// it (past limit, as an unlinked file's buffer may grow, it doubles on). append grows a large slice by a quarter at a time: a sequential
// write of 64 MiB (MaxDirty) copied its buffer about five times over on
// the way, and page-faulted in every copy (a 256 MiB cp into a mount:
// 2.1–2.5 → 1.5–1.7 s, decisions §45).
func (x *extent) grow(n int, limit int64) {
	need := len(x.data) + n
	if need <= cap(x.data) {
		return
	}
	c := max(2*cap(x.data), need)
	if int64(need) <= limit && int64(c) > limit/2 {
		c = int(limit)
	}
	grown := make([]byte, len(x.data), c)
	copy(grown, x.data)
	x.data = grown
}

func clone(b []byte) []byte {
	c := make([]byte, len(b), max(len(b), 4096))
	copy(c, b)
	return c
}

// truncate sets the logical size to n and reports whether anything
// changed.
func (d *fileData) truncate(n int64) bool {
	if n == d.size {
		return false
	}
	d.base = min(d.base, n)
	for len(d.exts) > 0 {
		last := &d.exts[len(d.exts)-1]
		if last.off >= n {
			d.dirtyBytes -= int64(len(last.data))
			d.exts = d.exts[:len(d.exts)-1]
			continue
		}
		if last.end() > n {
			d.dirtyBytes -= last.end() - n
			last.data = last.data[:n-last.off]
		}
		break
	}
	d.size = n
	return true
}

// covered reports whether buffered writes cover all of [lo, hi).
func (d *fileData) covered(lo, hi int64) bool {
	i := sort.Search(len(d.exts), func(k int) bool { return d.exts[k].end() > lo })
	for ; i < len(d.exts) && lo < hi; i++ {
		if d.exts[i].off > lo {
			return false
		}
		lo = d.exts[i].end()
	}
	return lo >= hi
}

// read fills dest with the file's bytes at off and returns how many it
// filled (short only at end of file). fetch reads committed content; it
// is called at most once, and only when buffered writes do not cover the
// committed part of the range.
func (d *fileData) read(dest []byte, off int64, fetch func(buf []byte, off int64) (int, error)) (int, error) {
	if off >= d.size || len(dest) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(dest)), d.size)
	buf := dest[:end-off]
	got := 0
	if cend := min(end, d.base); off < cend && !d.covered(off, cend) {
		n, err := fetch(buf[:cend-off], off)
		if err != nil {
			return 0, err
		}
		got = n
	}
	clear(buf[got:])
	i := sort.Search(len(d.exts), func(k int) bool { return d.exts[k].end() > off })
	for ; i < len(d.exts) && d.exts[i].off < end; i++ {
		x := &d.exts[i]
		lo, hi := max(off, x.off), min(end, x.end())
		copy(buf[lo-off:hi-off], x.data[lo-x.off:hi-x.off])
	}
	return len(buf), nil
}

// committed records that the vault now holds the logical content.
func (d *fileData) committed(mtime, ctime int64) {
	d.base, d.vsize = d.size, d.size
	d.exts, d.dirtyBytes = nil, 0
	d.vmtime, d.vctime = mtime, ctime
}

// whole reports whether d is a new file written from the start: its
// buffer is all of its content, in one extent.
func (d *fileData) whole() bool {
	return d.vsize == 0 && d.base == 0 && len(d.exts) == 1 && d.exts[0].off == 0 && d.exts[0].end() == d.size
}

// revert drops every buffered change: the file is its committed content
// again.
func (d *fileData) revert() {
	d.size, d.base = d.vsize, d.vsize
	d.exts, d.dirtyBytes = nil, 0
}
