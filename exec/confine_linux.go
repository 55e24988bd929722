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
// because its flags cannot be inspected: libc falls back to clone. The
// refused calls, and with watchNet every connect, go to the returned
// seccomp listener (watchRefusals answers them); the caller owns it.
func confine(watchNet bool) (int, error) {
	const (
		secbitNoRoot       = 1 << 0
		secbitNoRootLocked = 1 << 1
		secbitNoSetuidFix  = 1 << 2
		secbitNoSetuidLock = 1 << 3
	)
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbitNoRoot|secbitNoRootLocked|secbitNoSetuidFix|secbitNoSetuidLock, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("securebits: %w", err)
	}
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return -1, fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	listener, err := installSeccomp(watchNet)
	if err != nil {
		return -1, err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		unix.Close(listener)
		return -1, fmt.Errorf("drop capabilities: %w", err)
	}
	return listener, nil
}

// nsFlags are the clone flags that make a namespace.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// installSeccomp loads a filter and returns its notification listener:
// the calls that make or change mounts and namespaces, clone with a
// namespace flag and ptrace attaching to the sandbox's init (PID 1) go to
// the listener, which refuses them (EPERM) and records them; with
// watchNet so does connect, which the listener lets through. clone3
// answers ENOSYS, any call of a foreign ABI (x32, i386) EPERM; everything
// else is allowed.
func installSeccomp(watchNet bool) (int, error) {
	arch, ok := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	if !ok {
		return -1, fmt.Errorf("seccomp: architecture %s not supported", runtime.GOARCH)
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
		offNr, offArch, offArg0, offArg1 = 0, 4, 16, 24
		ptraceAttach, ptraceSeize        = 16, 0x4206
	)
	eperm := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	enosys := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	notify := uint32(unix.SECCOMP_RET_USER_NOTIF)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	// A small assembler: jumps name the label of their target.
	type ins struct {
		f      unix.SockFilter
		jt, jf string
		label  string
	}
	var p []ins
	op := func(code uint16, k uint32) { p = append(p, ins{f: unix.SockFilter{Code: code, K: k}}) }
	jump := func(code uint16, k uint32, jt, jf string) {
		p = append(p, ins{f: unix.SockFilter{Code: code, K: k}, jt: jt, jf: jf})
	}
	label := func(l string, code uint16, k uint32) {
		p = append(p, ins{f: unix.SockFilter{Code: code, K: k}, label: l})
	}

	op(ld, offArch)
	jump(jeq, arch, "", "eperm")
	op(ld, offNr)
	if runtime.GOARCH == "amd64" {
		const x32Bit = 0x40000000
		jump(jge, x32Bit, "eperm", "")
	}
	for _, nr := range denied {
		jump(jeq, nr, "notify", "")
	}
	jump(jeq, unix.SYS_CLONE3, "enosys", "")
	jump(jeq, unix.SYS_CLONE, "clone", "")
	jump(jeq, unix.SYS_PTRACE, "ptrace", "")
	if watchNet {
		jump(jeq, unix.SYS_CONNECT, "notify", "")
	}
	op(ret, allow)
	label("clone", ld, offArg0) // the flags' low 32 bits, which hold every CLONE_NEW*
	jump(jset, nsFlags, "notify", "allow")
	label("ptrace", ld, offArg1) // the pid
	jump(jeq, 1, "", "allow")
	op(ld, offArg0) // the request
	jump(jeq, ptraceAttach, "notify", "")
	jump(jeq, ptraceSeize, "notify", "allow")
	label("notify", ret, notify)
	label("eperm", ret, eperm)
	label("enosys", ret, enosys)
	label("allow", ret, allow)

	at := map[string]int{}
	for i, in := range p {
		if in.label != "" {
			at[in.label] = i
		}
	}
	prog := make([]unix.SockFilter, len(p))
	for i, in := range p {
		prog[i] = in.f
		for _, j := range []struct {
			label string
			off   *uint8
		}{{in.jt, &prog[i].Jt}, {in.jf, &prog[i].Jf}} {
			if j.label == "" {
				continue
			}
			d := at[j.label] - i - 1
			if d < 0 || d > 255 {
				return -1, fmt.Errorf("seccomp: jump to %s out of range", j.label)
			}
			*j.off = uint8(d)
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, fmt.Errorf("seccomp: %w", e)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}
