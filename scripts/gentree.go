//go:build ignore

// gentree writes the deterministic host tree that scripts/bench.sh compares
// avfs against: FILES files of SIZE bytes in directories of 100 files,
// DIR/sNN/fNN.dat (DIR/sNNN/... past 10,000 files). Content is
// pseudo-random (seeded by the file number), so it neither deduplicates
// nor compresses: the same work for cp, git and avfs on every run.
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
		for j := 0; j < size; j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("s%0*d", width, i/100), fmt.Sprintf("f%02d.dat", i%100))
		if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentree:", err)
	os.Exit(1)
}
