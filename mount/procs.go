package mount

import (
	"os"
	"runtime"
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
// read alone for 10 ms (docs/decisions.md §43).

// readerProcs is how many Ps SpareProcs adds.
const readerProcs = 3

// SpareProcs adds readerProcs Ps to GOMAXPROCS, unless the GOMAXPROCS
// environment variable sets it: Ps, not threads or CPUs, so that a
// process serving mounts always has an idle one while its readers block.
//
// Call it at the start of the process, before anything is mounted.
// runtime.GOMAXPROCS stops the world, and a world stopped while the
// process serves a mount can deadlock (as a garbage collection can; see
// exec.Spec.EnterDir): a goroutine the runtime counts as
// running while the kernel holds it on a request to that mount (a
// vfork(2)ed child in its execve, a fault on a mapped file) never stops,
// and the mount's server, stopped, never answers the request. Changing
// GOMAXPROCS at each mount and unmount did exactly that in CI
// (docs/decisions.md §43).
func SpareProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + readerProcs)
}
