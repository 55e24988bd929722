package vault

import (
	"encoding/binary"
	"iter"
)

// A file's chunk list is a sequence of records of hashLen bytes, which
// together cover chunks 0 … nchunks(size)-1 in order:
//
//   - a content record is the SHA-256 of one chunk's bytes;
//   - a hole record covers a run of n ≥ 1 chunks that read as zeros and
//     are stored nowhere: 24 zero bytes, then n as a big-endian uint64. A
//     SHA-256 that starts with 24 zero bytes would take 2^192 tries to
//     find.
//
// So a hole costs one record whatever its length: truncate -s 1P and a
// write at a huge offset are O(1), and a chunk of zeros written through
// the API or the mount is stored as a hole too. A list is dense when it
// has one record per chunk (holes of one chunk only): its record i is
// chunk i, so its records can be read and replaced by range in SQL (see
// node.lazy). A content chunk may be shorter than its slot: the bytes
// after it, up to the slot's end or the end of file, read as zeros; it
// never holds bytes past the end of file.

// holePrefix is how many leading zero bytes mark a hole record.
const holePrefix = hashLen - 8

// holeRecord is the record of a run of n hole chunks.
func holeRecord(n int64) []byte {
	r := make([]byte, hashLen)
	binary.BigEndian.PutUint64(r[holePrefix:], uint64(n))
	return r
}

// holeRun returns the number of chunks record r covers if it is a hole.
func holeRun(r []byte) (int64, bool) {
	for _, b := range r[:holePrefix] {
		if b != 0 {
			return 0, false
		}
	}
	return int64(binary.BigEndian.Uint64(r[holePrefix:])), true
}

// span is how many chunks record r covers.
func span(r []byte) int64 {
	if n, ok := holeRun(r); ok {
		return n
	}
	return 1
}

// dense reports whether list has one record per chunk of a file of size
// bytes.
func dense(list []byte, size int64) bool { return int64(len(list)) == nchunks(size)*hashLen }

// contentHashes yields the content records of list, skipping holes.
func contentHashes(list []byte) iter.Seq[[hashLen]byte] {
	return func(yield func([hashLen]byte) bool) {
		for i := 0; i+hashLen <= len(list); i += hashLen {
			r := list[i : i+hashLen]
			if _, hole := holeRun(r); hole {
				continue
			}
			if !yield([hashLen]byte(r)) {
				return
			}
		}
	}
}

// records yields the records of list with the index of the first chunk
// each covers.
func records(list []byte) iter.Seq2[int64, []byte] {
	return func(yield func(int64, []byte) bool) {
		idx := int64(0)
		for i := 0; i+hashLen <= len(list); i += hashLen {
			r := list[i : i+hashLen]
			if !yield(idx, r) {
				return
			}
			idx += span(r)
		}
	}
}

// cutList returns the records that cover chunks [from, to) of list, with
// the hole runs at either edge cut to the range.
func cutList(list []byte, from, to int64) []byte {
	if from >= to {
		return nil
	}
	var out []byte
	for idx, r := range records(list) {
		n := span(r)
		if idx+n <= from {
			continue
		}
		if idx >= to {
			break
		}
		if _, hole := holeRun(r); hole {
			out = appendHole(out, min(idx+n, to)-max(idx, from))
		} else {
			out = append(out, r...)
		}
	}
	return out
}

// appendHole appends a run of n hole chunks to list, merging it with a
// hole record at the end.
func appendHole(list []byte, n int64) []byte {
	if n <= 0 {
		return list
	}
	if k := len(list); k >= hashLen {
		if m, hole := holeRun(list[k-hashLen:]); hole {
			binary.BigEndian.PutUint64(list[k-8:], uint64(m+n))
			return list
		}
	}
	return append(list, holeRecord(n)...)
}

// appendRecords appends records to list, merging neighbouring holes.
func appendRecords(list, recs []byte) []byte {
	for i := 0; i+hashLen <= len(recs); i += hashLen {
		r := recs[i : i+hashLen]
		if n, hole := holeRun(r); hole {
			list = appendHole(list, n)
		} else {
			list = append(list, r...)
		}
	}
	return list
}

// spliceList returns list, covering total chunks, with chunks [from, to)
// replaced by the records ins.
func spliceList(list []byte, total, from, to int64, ins []byte) []byte {
	out := make([]byte, 0, len(list)+len(ins)+2*hashLen)
	out = appendRecords(out, cutList(list, 0, from))
	out = appendRecords(out, ins)
	return appendRecords(out, cutList(list, to, total))
}

// perChunk expands the records recs, which cover n chunks, to one record
// per chunk (holes of one chunk each). n is bounded by the caller: it is
// the number of chunks a write touches.
func perChunk(recs []byte, n int64) []byte {
	out := make([]byte, 0, n*hashLen)
	for _, r := range records(recs) {
		k, hole := holeRun(r)
		if !hole {
			out = append(out, r...)
			continue
		}
		for range k {
			out = append(out, holeRecord(1)...)
		}
	}
	return out
}

// zero reports whether b holds only zero bytes.
func zero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// seekList finds, in a file of size bytes with chunk list list, the first
// offset at or after off that is data (or, with hole, in a hole; the end
// of file counts as one). ok is false when there is none: off is at or
// past the end, or only holes follow it. A hole is a whole run of hole
// chunks; the zeros that end a short chunk count as data.
func seekList(list []byte, size, off int64, hole bool) (int64, bool) {
	if off < 0 || off >= size {
		return 0, false
	}
	for idx, r := range records(list) {
		start, end := idx*ChunkSize, min((idx+span(r))*ChunkSize, size)
		if end <= off {
			continue
		}
		if _, isHole := holeRun(r); isHole == hole {
			return max(off, start), true
		}
	}
	if hole {
		return size, true
	}
	return 0, false
}
