package exec

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func sysProcAttr() *syscall.SysProcAttr {
	// A group of its own, so that one signal reaches everything the command
	// started, and nothing of the worker.
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process in the group. ESRCH (group
// already empty) and EPERM (a member changed identity) are not actionable.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = unix.Kill(-pgid, sig)
}

// waitExited blocks until the process has exited without reaping it
// (WNOWAIT): while it is a zombie its pid, which is also the group id,
// cannot be reused, so signalling the group afterwards is safe.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("waitid %d: %w", pid, err)
			}
			return nil
		}
	}
}

// exitStatus splits a wait status into an exit code or a signal name.
func exitStatus(ps *os.ProcessState) (*int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if name := unix.SignalName(ws.Signal()); name != "" {
			return nil, name
		}
		return nil, fmt.Sprintf("signal %d", int(ws.Signal()))
	}
	code := ps.ExitCode()
	if code < 0 {
		return nil, ""
	}
	return &code, ""
}
