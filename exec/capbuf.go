package exec

import "fmt"

// capBuffer is an io.Writer that keeps the first and the last bytes written
// to it, up to a fixed total, while counting everything. Command output is
// most useful at its ends (the command line echo and the final error), so a
// flood in the middle is summarised by a marker instead of being kept.
//
// A capBuffer is not safe for concurrent use: one goroutine writes it, and
// it is read only after that goroutine has finished.
type capBuffer struct {
	headCap int
	head    []byte // first headCap bytes, grown on demand

	tailCap  int
	tail     []byte // ring of the last tailCap bytes past the head, allocated on first overflow
	tailNext int    // ring index of the next byte to write
	tailLen  int    // valid bytes in the ring (≤ tailCap)

	total int64
}

// newCapBuffer returns a buffer that keeps at most max bytes: the first
// half and the last half (the tail gets the odd byte).
func newCapBuffer(max int) *capBuffer {
	if max < 0 {
		max = 0
	}
	return &capBuffer{headCap: max / 2, tailCap: max - max/2}
}

// Write records p; it never fails, so a command is never blocked or killed
// by EPIPE because its output is being capped.
func (b *capBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if room := b.headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || b.tailCap == 0 {
		return n, nil
	}
	if b.tail == nil {
		b.tail = make([]byte, b.tailCap)
	}
	if len(p) >= b.tailCap {
		copy(b.tail, p[len(p)-b.tailCap:])
		b.tailNext, b.tailLen = 0, b.tailCap
		return n, nil
	}
	k := copy(b.tail[b.tailNext:], p)
	copy(b.tail, p[k:])
	b.tailNext = (b.tailNext + len(p)) % b.tailCap
	b.tailLen = min(b.tailLen+len(p), b.tailCap)
	return n, nil
}

// Total is the number of bytes written, kept or not.
func (b *capBuffer) Total() int64 { return b.total }

// Truncated reports whether some bytes were dropped.
func (b *capBuffer) Truncated() bool {
	return b.total > int64(len(b.head)+b.tailLen)
}

// Bytes returns a fresh copy of the kept bytes: the head, then, if bytes
// were dropped, a marker line saying how many, then the tail in order.
func (b *capBuffer) Bytes() []byte {
	var marker string
	if omitted := b.total - int64(len(b.head)+b.tailLen); omitted > 0 {
		marker = fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted)
	}
	out := make([]byte, 0, len(b.head)+len(marker)+b.tailLen)
	out = append(out, b.head...)
	out = append(out, marker...)
	if b.tailLen < b.tailCap {
		// The ring has not wrapped yet: valid bytes start at index 0.
		return append(out, b.tail[:b.tailLen]...)
	}
	out = append(out, b.tail[b.tailNext:]...)
	return append(out, b.tail[:b.tailNext]...)
}
