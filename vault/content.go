package vault

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
)

// ChunkSize is the unit of content addressing. Chunk i of a file holds
// bytes [i*ChunkSize, (i+1)*ChunkSize); only the last may be shorter. A
// partial write rewrites just the chunks it touches.
const ChunkSize = 64 << 10

const hashLen = sha256.Size

func nchunks(size int64) int64 { return (size + ChunkSize - 1) / ChunkSize }

// putChunk stores data under its hash (once per store) and returns the hash.
func (t *Tx) putChunk(data []byte) ([hashLen]byte, error) {
	h := sha256.Sum256(data)
	return h, t.storeChunk(h, data)
}

// storeChunk stores data under its hash h, unless the store has it.
func (t *Tx) storeChunk(h [hashLen]byte, data []byte) error {
	if _, err := t.exec(`INSERT INTO chunks(hash, data) VALUES(?, ?) ON CONFLICT(hash) DO NOTHING`, h[:], data); err != nil {
		return fmt.Errorf("store chunk: %w", err)
	}
	return nil
}

func (t *Tx) chunk(h []byte) ([]byte, error) {
	var data []byte
	err := t.row(`SELECT data FROM chunks WHERE hash=?`, h).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %x missing: %w", h, ErrConflict)
	}
	return data, mapSQLErr(err)
}

// storeContent splits data into chunks and returns the node's chunk list;
// chunks of zeros become holes.
func (t *Tx) storeContent(data []byte) ([]byte, error) {
	list := make([]byte, 0, nchunks(int64(len(data)))*hashLen)
	for off := 0; off < len(data); off += ChunkSize {
		end := min(off+ChunkSize, len(data))
		if zero(data[off:end]) {
			list = appendHole(list, 1)
			continue
		}
		h, err := t.putChunk(data[off:end])
		if err != nil {
			return nil, err
		}
		list = append(list, h[:]...)
	}
	return list, nil
}

// readAt copies n's content at off into buf and returns how many bytes it
// copied (short at end of file). Holes, and the end of a chunk shorter
// than its slot, read as zeros.
func (t *Tx) readAt(n *node, off int64, buf []byte) (int, error) {
	if off >= n.size || len(buf) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(buf)), n.size)
	out := buf[:end-off]
	clear(out)
	first := off / ChunkSize
	list, err := t.hashes(n, first, (end-1)/ChunkSize+1)
	if err != nil {
		return 0, err
	}
	for i, r := range records(list) {
		if _, hole := holeRun(r); hole {
			continue
		}
		idx := first + i
		data, err := t.chunk(r)
		if err != nil {
			return 0, err
		}
		lo, hi := max(off, idx*ChunkSize), min(end, idx*ChunkSize+int64(len(data)))
		if lo < hi {
			copy(out[lo-off:], data[lo-idx*ChunkSize:hi-idx*ChunkSize])
		}
	}
	return len(out), nil
}

// maxWholeRead is the largest file ReadFile returns whole: a sparse file
// may be far larger than memory. Larger ones are read by range.
const maxWholeRead = 1 << 30

func (t *Tx) content(n *node) ([]byte, error) {
	if n.size > maxWholeRead {
		return nil, fmt.Errorf("file of %d bytes is larger than a whole read returns (%d): read it by range: %w", n.size, maxWholeRead, ErrInvalidArgument)
	}
	buf := make([]byte, n.size)
	_, err := t.readAt(n, 0, buf)
	return buf, err
}

// rewrite sets n's size to size and its bytes at off to data (off+len(data)
// must not exceed size). Its cost follows len(data), not the file's size:
// a cut re-stores at most the new last chunk, an extension adds one hole
// record (and pads a short last chunk, see padChunk), and only the chunks
// data touches are read and stored again. A chunk whose content comes out
// unchanged is not stored again, one that data covers whole is not read,
// and one that comes out all zeros becomes a hole.
func (t *Tx) rewrite(n *node, off int64, data []byte, size int64) error {
	oldSize := n.size
	if size != n.size {
		if err := t.loadChunks(n); err != nil {
			return err
		}
		if err := t.resize(n, size); err != nil {
			return err
		}
	}
	first, last := off/ChunkSize, (off+int64(len(data))-1)/ChunkSize
	if idx := oldSize / ChunkSize; size > oldSize && oldSize%ChunkSize != 0 && (len(data) == 0 || idx < first || idx > last) {
		if err := t.padChunk(n, idx); err != nil {
			return err
		}
	}
	if len(data) == 0 {
		return nil
	}
	cur, err := t.hashes(n, first, last+1)
	if err != nil {
		return err
	}
	old := perChunk(cur, last-first+1)
	ins := make([]byte, 0, len(old))
	for idx := first; idx <= last; idx++ {
		lo, hi := idx*ChunkSize, min((idx+1)*ChunkSize, size)
		buf := make([]byte, hi-lo)
		rec := old[(idx-first)*hashLen : (idx-first+1)*hashLen]
		_, hole := holeRun(rec)
		if covered := off <= lo && off+int64(len(data)) >= hi; !hole && !covered {
			prev, err := t.chunk(rec)
			if err != nil {
				return err
			}
			copy(buf, prev)
		}
		dlo, dhi := max(lo, off), min(hi, off+int64(len(data)))
		copy(buf[dlo-lo:], data[dlo-off:dhi-off])
		if zero(buf) {
			ins = append(ins, holeRecord(1)...)
			continue
		}
		h := sha256.Sum256(buf)
		if hole || !bytes.Equal(h[:], rec) {
			if err := t.storeChunk(h, buf); err != nil {
				return err
			}
		}
		ins = append(ins, h[:]...)
	}
	newN := nchunks(size)
	if n.lazy {
		// A dense list stays in the database, one record per chunk:
		// splice the new records in.
		n.splice = &splice{keep: first * hashLen, ins: ins, tailFrom: (last + 1) * hashLen, tailTo: newN * hashLen}
		return nil
	}
	n.chunks = spliceList(n.chunks, newN, first, last+1, ins)
	return nil
}

// padChunk stores content chunk idx of n, whose list is loaded, again
// with the zeros that now follow it up to its slot's end or the end of
// file. A file that grew keeps its old last chunk short otherwise, and
// the same content would have two chunk lists: a change summary, which
// compares lists, would report a file whose bytes did not change.
func (t *Tx) padChunk(n *node, idx int64) error {
	rec := cutList(n.chunks, idx, idx+1)
	if _, hole := holeRun(rec); hole {
		return nil
	}
	prev, err := t.chunk(rec)
	if err != nil {
		return err
	}
	want := min(ChunkSize, n.size-idx*ChunkSize)
	if int64(len(prev)) >= want {
		return nil
	}
	buf := make([]byte, want)
	copy(buf, prev)
	h, err := t.putChunk(buf)
	if err != nil {
		return err
	}
	n.chunks = spliceList(n.chunks, nchunks(n.size), idx, idx+1, h[:])
	return nil
}

// resize cuts or extends n, whose chunk list is loaded, to size bytes.
// An extension is a hole; a cut re-stores the new last chunk if it held
// bytes past the new end.
func (t *Tx) resize(n *node, size int64) error {
	oldN, newN := nchunks(n.size), nchunks(size)
	if size > n.size {
		n.chunks = spliceList(n.chunks, oldN, oldN, oldN, holeRecord(newN-oldN))
		n.size = size
		return nil
	}
	n.chunks = spliceList(n.chunks, oldN, newN, oldN, nil)
	n.size = size
	tail := size % ChunkSize
	if tail == 0 {
		return nil
	}
	rec := cutList(n.chunks, newN-1, newN)
	if _, hole := holeRun(rec); hole {
		return nil
	}
	prev, err := t.chunk(rec)
	if err != nil || int64(len(prev)) <= tail {
		return err
	}
	cut := holeRecord(1)
	if !zero(prev[:tail]) {
		h, err := t.putChunk(prev[:tail])
		if err != nil {
			return err
		}
		cut = h[:]
	}
	n.chunks = spliceList(n.chunks, newN, newN-1, newN, cut)
	return nil
}
