//go:build ignore

// gentree writes the deterministic host tree that scripts/bench.sh compares
// avfs against: FILES files of SIZE bytes in directories of 100 files,
// DIR/sNN/fNN.dat (DIR/sNNN/... past 10,000 files). Content is
// pseudo-random (seeded by the file number), so it neither deduplicates
// nor compresses: the same work for cp, git and avfs on every run. With
// GENTREE_TEXT=1 the content is lines of text instead, and one file in a
// hundred has a line with the word "needle" (for grep and search).
//
//	go run ./scripts/gentree.go DIR [FILES [SIZE]]
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 4 {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/gentree.go DIR [FILES [SIZE]]")
		os.Exit(2)
	}
	dir, files, size := os.Args[1], 10000, 20000
	var err error
	if len(os.Args) > 2 {
		if files, err = strconv.Atoi(os.Args[2]); err != nil {
			fail(err)
		}
	}
	if len(os.Args) > 3 {
		if size, err = strconv.Atoi(os.Args[3]); err != nil {
			fail(err)
		}
	}
	width := max(2, len(strconv.Itoa((files-1)/100)))
	buf := make([]byte, size+8)
	for i := 0; i < files; i++ {
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("s%0*d", width, i/100)), 0o755); err != nil {
				fail(err)
			}
		}
		r := rand.New(rand.NewPCG(uint64(i), 0x61766673))
		if os.Getenv("GENTREE_TEXT") == "1" {
			textContent(buf[:size], r, i%100 == 42)
		} else {
			randomContent(buf[:size], r)
		}
		p := filepath.Join(dir, fmt.Sprintf("s%0*d", width, i/100), fmt.Sprintf("f%02d.dat", i%100))
		if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
			fail(err)
		}
	}
}

var words = []string{"alpha", "build", "config", "delta", "error", "file", "graph", "handler", "index", "json", "kernel", "lock", "mount", "node", "output", "parse", "query", "retry", "stream", "token", "vault", "worker"}

// textContent fills buf with lines of words; with needle, one line names it.
func textContent(buf []byte, r *rand.Rand, needle bool) {
	b := buf[:0]
	for len(b) < len(buf) {
		if needle && len(b) > len(buf)/2 {
			b = append(b, "found the needle here\n"...)
			needle = false
			continue
		}
		b = append(b, words[r.IntN(len(words))]...)
		if r.IntN(8) == 0 {
			b = append(b, '\n')
		} else {
			b = append(b, ' ')
		}
	}
	copy(buf, b)
	buf[len(buf)-1] = '\n'
}

func randomContent(buf []byte, r *rand.Rand) {
	for j := 0; j < len(buf); j += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && j+k < len(buf); k++ {
			buf[j+k] = byte(v >> (8 * k))
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentree:", err)
	os.Exit(1)
}
