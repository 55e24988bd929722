package mount

import (
	"os"
	"strconv"
	"syscall"
)

// closeFuseFDsOnExec marks every open /dev/fuse descriptor of this process
// close-on-exec. go-fuse's direct mount returns its descriptor without
// that flag, so every command the worker starts would inherit it: after a
// worker dies, a surviving child keeps the dead mount's connection open,
// and everything touching the mount hangs instead of failing with
// ENOTCONN. Callers hold syscall.ForkLock so no fork sees the gap.
func closeFuseFDsOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			syscall.CloseOnExec(fd)
		}
	}
}
