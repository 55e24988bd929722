package exec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// wantCapped is the reference model: what a capBuffer of size max must hold
// after data was written to it, however the writes were split.
func wantCapped(data []byte, max int) []byte {
	if len(data) <= max {
		return data
	}
	head, tail := max/2, max-max/2
	var out []byte
	out = append(out, data[:head]...)
	out = append(out, fmt.Sprintf("\n[... %d bytes omitted ...]\n", len(data)-max)...)
	return append(out, data[len(data)-tail:]...)
}

func TestCapBufferSmallKeepsEverything(t *testing.T) {
	b := newCapBuffer(16)
	b.Write([]byte("hello "))
	b.Write([]byte("world"))
	if got, want := string(b.Bytes()), "hello world"; got != want {
		t.Fatalf("Bytes() = %q, want %q", got, want)
	}
	if b.Total() != 11 || b.Truncated() {
		t.Fatalf("Total() = %d, Truncated() = %v, want 11, false", b.Total(), b.Truncated())
	}
}

func TestCapBufferExactFitIsNotTruncated(t *testing.T) {
	b := newCapBuffer(8)
	b.Write([]byte("abcdefgh"))
	if got := string(b.Bytes()); got != "abcdefgh" || b.Truncated() {
		t.Fatalf("Bytes() = %q, Truncated() = %v, want %q, false", got, b.Truncated(), "abcdefgh")
	}
}

func TestCapBufferKeepsHeadAndTail(t *testing.T) {
	b := newCapBuffer(8)
	b.Write([]byte("0123456789abcdef"))
	want := "0123\n[... 8 bytes omitted ...]\ncdef"
	if got := string(b.Bytes()); got != want {
		t.Fatalf("Bytes() = %q, want %q", got, want)
	}
	if b.Total() != 16 || !b.Truncated() {
		t.Fatalf("Total() = %d, Truncated() = %v, want 16, true", b.Total(), b.Truncated())
	}
}

func TestCapBufferZeroAndOddSizes(t *testing.T) {
	for _, max := range []int{0, 1, 3} {
		b := newCapBuffer(max)
		data := []byte("abcdefghij")
		b.Write(data)
		if got, want := b.Bytes(), wantCapped(data, max); !bytes.Equal(got, want) {
			t.Errorf("max %d: Bytes() = %q, want %q", max, got, want)
		}
	}
}

// Any split of the same input must give the same result as the model; this
// exercises the ring's wrap-around and the head/tail boundary.
func TestCapBufferRandomWritesMatchModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		max := rng.IntN(64)
		data := make([]byte, rng.IntN(300))
		for j := range data {
			data[j] = byte('a' + rng.IntN(26))
		}
		b := newCapBuffer(max)
		for rest := data; len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 80))
			if k, err := b.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write = %d, %v, want %d, nil", k, err, n)
			}
			rest = rest[n:]
		}
		if got, want := b.Bytes(), wantCapped(data, max); !bytes.Equal(got, want) {
			t.Fatalf("case %d (max %d, %d bytes): Bytes() = %q, want %q", i, max, len(data), got, want)
		}
		if b.Total() != int64(len(data)) || b.Truncated() != (len(data) > max) {
			t.Fatalf("case %d: Total() = %d, Truncated() = %v, want %d, %v",
				i, b.Total(), b.Truncated(), len(data), len(data) > max)
		}
	}
}

func TestCapBufferMemoryIsBounded(t *testing.T) {
	const max = 1 << 10
	b := newCapBuffer(max)
	chunk := bytes.Repeat([]byte("x"), 4096)
	allocs := testing.AllocsPerRun(1, func() {
		for range 10_000 {
			b.Write(chunk)
		}
	})
	if cap(b.head)+cap(b.tail) > 2*max {
		t.Fatalf("buffer capacity %d after 40 MB, want at most %d", cap(b.head)+cap(b.tail), 2*max)
	}
	// The head grows a few times and the ring is allocated once; the 10,000
	// writes themselves must not allocate.
	if allocs > 20 {
		t.Fatalf("%v allocations for 10,000 writes, want at most 20", allocs)
	}
}
