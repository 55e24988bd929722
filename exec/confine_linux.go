package exec

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lockThread keeps the sandbox init on one thread: capabilities and
// seccomp filters belong to a thread, and the command must be forked from
// the thread that dropped them.
func lockThread() { runtime.LockOSThread() }

// catchSignals catches every signal, so that none of them ends the init
// before the command has ended and been reported. The returned channel
// holds the first few that arrived.
func catchSignals() chan os.Signal {
	c := make(chan os.Signal, 8)
	signal.Notify(c)
	return c
}

// pendingStop returns a signal meant to stop the command (SIGTERM, SIGINT,
// SIGHUP, SIGQUIT) that has arrived, or 0; it drains the others.
func pendingStop(c chan os.Signal) syscall.Signal {
	for {
		select {
		case s := <-c:
			switch s {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
				return s.(syscall.Signal)
			}
		default:
			return 0
		}
	}
}

// confine takes away from the calling thread, and everything it starts,
// what could undo the sandbox: every capability (bounding, ambient,
// effective, permitted and inheritable sets; root gains none back on exec),
// privilege gain through setuid files, and the system calls that make new
// namespaces or mounts (seccomp). clone3 answers ENOSYS, as under Docker,
// because its flags cannot be inspected: libc falls back to clone.
func confine() error {
	const (
		secbitNoRoot       = 1 << 0
		secbitNoRootLocked = 1 << 1
		secbitNoSetuidFix  = 1 << 2
		secbitNoSetuidLock = 1 << 3
	)
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbitNoRoot|secbitNoRootLocked|secbitNoSetuidFix|secbitNoSetuidLock, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := installSeccomp(); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}

// nsFlags are the clone flags that make a namespace.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// installSeccomp loads a filter: EPERM for the calls that make or change
// mounts and namespaces, for clone with a namespace flag and for any call
// of a foreign ABI (x32, i386), ENOSYS for clone3, everything else allowed.
func installSeccomp() error {
	arch, ok := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("seccomp: architecture %s not supported", runtime.GOARCH)
	}
	denied := []uint32{
		unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
		unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN,
		unix.SYS_FSMOUNT, unix.SYS_FSCONFIG, unix.SYS_FSPICK, unix.SYS_CHROOT,
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		// offsets in struct seccomp_data
		offNr, offArch, offArg0 = 0, 4, 16
	)
	eperm := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	p := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, Jt: 1, K: arch},
		{Code: ret, K: eperm},
		{Code: ld, K: offNr},
	}
	if runtime.GOARCH == "amd64" {
		const x32Bit = 0x40000000
		p = append(p, unix.SockFilter{Code: jge, Jf: 1, K: x32Bit}, unix.SockFilter{Code: ret, K: eperm})
	}
	for _, nr := range denied {
		p = append(p, unix.SockFilter{Code: jeq, Jf: 1, K: nr}, unix.SockFilter{Code: ret, K: eperm})
	}
	p = append(p,
		unix.SockFilter{Code: jeq, Jf: 1, K: unix.SYS_CLONE3},
		unix.SockFilter{Code: ret, K: enosys},
		unix.SockFilter{Code: jeq, Jf: 3, K: unix.SYS_CLONE},
		unix.SockFilter{Code: ld, K: offArg0}, // the flags' low 32 bits, which hold every CLONE_NEW*
		unix.SockFilter{Code: jset, Jf: 1, K: nsFlags},
		unix.SockFilter{Code: ret, K: eperm},
		unix.SockFilter{Code: ret, K: allow},
	)
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
