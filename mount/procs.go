package mount

import (
	"runtime"
	"sync"
)

// Ps for the readers of /dev/fuse.
//
// go-fuse keeps up to maxReaders+1 goroutines blocked in read(2) on the
// FUSE device (maxReaders is GOMAXPROCS when the server starts, at least
// 2), and each enters that read holding one of the runtime's Ps. When no
// P is left idle, the runtime's sysmon takes a P back from a read that
// has blocked for 20 µs and wakes a thread to hand it to; and since it
// took one, it polls again 20 µs later instead of backing off towards
// 10 ms. With GOMAXPROCS 2, as on a two-CPU machine, that happened after
// nearly every request: during git init + add + commit in a mount
// (35,000 requests) sysmon and the hand-offs it started were a fifth of
// the mount's CPU (perf). With a P left idle, sysmon leaves a blocked
// read alone for 10 ms.
//
// So while a mount is served its process runs with readerProcs more Ps,
// up to maxReaderProcs for all its mounts. They are Ps, not threads or
// CPUs: a P held by a blocked read runs nothing. A mount started while
// others are served sees the larger GOMAXPROCS, so go-fuse gives it more
// readers (at most 16). Measured on two CPUs, scripts/mountcpu.sh with
// the old and new binary in turns, four runs each: git's mount CPU 1.55
// → 1.23 s, its wall time 2.18 → 1.84 s (docs/decisions.md §43).

const (
	readerProcs    = 3
	maxReaderProcs = 8
)

// procs counts the served mounts of this process and the Ps added for
// them.
var procs procsState

type procsState struct {
	mu     sync.Mutex
	mounts int
	added  int
}

// reserveProcs adds a served mount's Ps; the returned func takes them
// back. A GOMAXPROCS set by someone else while mounts are served is kept,
// give or take the Ps added.
func reserveProcs() (release func()) {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	procs.mounts++
	procs.resize()
	var once sync.Once
	return func() {
		once.Do(func() {
			procs.mu.Lock()
			defer procs.mu.Unlock()
			procs.mounts--
			procs.resize()
		})
	}
}

// resize moves GOMAXPROCS by the change in the Ps the served mounts
// need. p.mu is held.
func (p *procsState) resize() {
	want := min(p.mounts*readerProcs, maxReaderProcs)
	if want == p.added {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)+want-p.added))
	p.added = want
}
