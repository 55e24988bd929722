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

// storeContent splits data into chunks and returns the node's chunk list.
func (t *Tx) storeContent(data []byte) ([]byte, error) {
	list := make([]byte, 0, nchunks(int64(len(data)))*hashLen)
	for off := 0; off < len(data); off += ChunkSize {
		end := min(off+ChunkSize, len(data))
		h, err := t.putChunk(data[off:end])
		if err != nil {
			return nil, err
		}
		list = append(list, h[:]...)
	}
	return list, nil
}

// readAt copies n's content at off into buf and returns how many bytes it
// copied (short at end of file).
func (t *Tx) readAt(n *node, off int64, buf []byte) (int, error) {
	if off >= n.size || len(buf) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(buf)), n.size)
	done := 0
	first := off / ChunkSize
	list, err := t.hashes(n, first, (end-1)/ChunkSize+1)
	if err != nil {
		return 0, err
	}
	for idx := first; idx*ChunkSize < end; idx++ {
		data, err := t.chunk(list[(idx-first)*hashLen : (idx-first+1)*hashLen])
		if err != nil {
			return done, err
		}
		lo := max(off, idx*ChunkSize) - idx*ChunkSize
		hi := min(end, (idx+1)*ChunkSize) - idx*ChunkSize
		done += copy(buf[done:], data[lo:hi])
	}
	return done, nil
}

func (t *Tx) content(n *node) ([]byte, error) {
	buf := make([]byte, n.size)
	_, err := t.readAt(n, 0, buf)
	return buf, err
}

// rewrite sets n's size to size and its bytes at off to data (off+len(data)
// must not exceed size). Only the chunks that change are read and stored
// again, and only their hashes are read and replaced in the chunk list;
// bytes between the old end of file and off read as zeros. A chunk whose
// content comes out unchanged is not stored again, and one that data
// covers whole is not read.
func (t *Tx) rewrite(n *node, off int64, data []byte, size int64) error {
	oldN, newN := nchunks(n.size), nchunks(size)
	// Rewrite the chunks data touches and, when the size changes, every
	// chunk from the old (or new) end of file on; all others are kept.
	first, last := newN, int64(-1)
	if len(data) > 0 {
		first, last = off/ChunkSize, (off+int64(len(data))-1)/ChunkSize
	}
	if size != n.size {
		first, last = min(first, min(n.size, size)/ChunkSize), newN-1
	}
	last = min(last, newN-1)
	// The old hashes of the rewritten chunks that exist.
	old, err := t.hashes(n, first, min(last+1, oldN))
	if err != nil {
		return err
	}
	var ins []byte
	if first <= last {
		ins = make([]byte, 0, (last-first+1)*hashLen)
	}
	for idx := first; idx <= last; idx++ {
		lo, hi := idx*ChunkSize, min((idx+1)*ChunkSize, size)
		buf := make([]byte, hi-lo)
		var oldHash []byte // set when the old chunk was read, so it exists
		if covered := off <= lo && off+int64(len(data)) >= hi; idx < oldN && !covered {
			oldHash = old[(idx-first)*hashLen : (idx-first+1)*hashLen]
			prev, err := t.chunk(oldHash)
			if err != nil {
				return err
			}
			copy(buf, prev)
		}
		if dlo, dhi := max(lo, off), min(hi, off+int64(len(data))); dlo < dhi {
			copy(buf[dlo-lo:], data[dlo-off:dhi-off])
		}
		h := sha256.Sum256(buf)
		if !bytes.Equal(h[:], oldHash) {
			if err := t.storeChunk(h, buf); err != nil {
				return err
			}
		}
		ins = append(ins, h[:]...)
	}
	if first > last {
		first, last = newN, newN-1
	}
	if n.lazy {
		// The list stays in the database: splice the new hashes in.
		n.splice = &splice{keep: first * hashLen, ins: ins, tailFrom: (last + 1) * hashLen, tailTo: newN * hashLen}
	} else {
		list := make([]byte, newN*hashLen)
		copy(list, n.chunks)
		copy(list[first*hashLen:], ins)
		n.chunks = list
	}
	n.size = size
	return nil
}
