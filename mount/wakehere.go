package mount

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Where the kernel wakes a mount's server.
//
// Every FUSE request wakes a server thread blocked in read(2) on
// /dev/fuse while the requesting thread sleeps until the answer. The
// scheduler mostly wakes the server on the other CPU, and on a two-CPU
// VM each of those cross-CPU wake-ups costs more than the work: a
// request's round trip took 30–45 µs, where a pipe's takes 7 µs on one
// CPU. Kernels that carry the fuse module parameter wake_here wake the
// server on the requester's CPU, which is idle while it waits: measured
// on one (scripts/mountbench.sh, in turns), git init + add + commit in
// a mount 1.60 → 0.96 s, an unlink 95 → 49 µs (docs/decisions.md §46).

// wakeHereParam is the fuse module's parameter; absent from kernels that
// do not carry it.
const wakeHereParam = "/sys/module/fuse/parameters/wake_here"

var wakeHereOnce sync.Once

// WakeServersHere sets the fuse module parameter wake_here to Y, the
// first time a process calls it, when the kernel has that parameter and
// the process may write it (root). The parameter is the machine's, not
// the mount's: it holds for every FUSE mount until changed back (echo N
// into it), and avfs never changes it back, since another process may be
// serving mounts. New calls it when Options.WakeHere is set. A failure
// only costs speed, so it is logged, not returned.
func WakeServersHere(log *slog.Logger) {
	wakeHereOnce.Do(func() {
		changed, err := setParam(wakeHereParam, "Y")
		switch {
		case err != nil:
			log.Info("fuse: wake_here left as it is", keyErr, err)
		case changed:
			log.Info("fuse: wake_here set to Y: the kernel wakes a mount's server on the CPU of the request (every FUSE mount of this machine; mount.wake_here=false leaves it alone)")
		}
	})
}

// setParam writes value into the module parameter file path unless it
// already holds it. A missing file (a kernel without the parameter) is
// not an error and changes nothing.
func setParam(path, value string) (changed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(string(b)) == value {
		return false, nil
	}
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return false, err
	}
	return true, nil
}
