package exec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Refusal is something the sandbox refused a command, counted: a system
// call its seccomp filter stops (Kind "syscall": mount, umount2, unshare,
// setns, clone with a namespace flag, pivot_root, chroot, the fs* mount
// API, ptrace of the sandbox's init) or, without the network, a connection
// to an address off the sandbox's own loopback (Kind "network"; the
// kernel answers it "network unreachable").
type Refusal struct {
	Kind   string `json:"kind"`             // syscall | network
	Call   string `json:"call"`             // the system call
	Target string `json:"target,omitempty"` // network: address:port
	Count  int    `json:"count"`
}

// maxRefusals bounds the distinct refusals a run reports.
const maxRefusals = 32

// refusalWatch answers a seccomp filter's notifications for one run: it
// refuses (EPERM) the calls the filter hands it and records them, and
// lets connect through after noting where it went.
type refusalWatch struct {
	fd   int
	mu   sync.Mutex
	list []Refusal
}

// seccompNotif and seccompNotifResp are the kernel's struct seccomp_notif
// and struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// watchRefusals starts answering the notifications of listener, the fd
// that installSeccomp returned. The watch ends when no process uses the
// filter any more.
func watchRefusals(listener int) *refusalWatch {
	w := &refusalWatch{fd: listener}
	go w.loop()
	return w
}

func (w *refusalWatch) loop() {
	defer unix.Close(w.fd)
	for {
		pfd := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		if n > 0 && pfd[0].Revents&unix.POLLIN == 0 {
			return // POLLHUP: the run is over
		}
		var req seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(w.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue // the caller died meanwhile
			}
			return
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		if req.Nr == unix.SYS_CONNECT {
			resp.Error, resp.Flags = 0, unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
			if target := connectTarget(req); target != "" {
				w.add(Refusal{Kind: "network", Call: "connect", Target: target})
			}
		} else {
			w.add(Refusal{Kind: "syscall", Call: syscallName(req.Nr)})
		}
		runtime.KeepAlive(req)
		unix.Syscall(unix.SYS_IOCTL, uintptr(w.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}

func (w *refusalWatch) add(r Refusal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.list {
		if w.list[i].Kind == r.Kind && w.list[i].Call == r.Call && w.list[i].Target == r.Target {
			w.list[i].Count++
			return
		}
	}
	if len(w.list) < maxRefusals {
		r.Count = 1
		w.list = append(w.list, r)
	}
}

// result returns what was refused so far. Every refusal is recorded
// before the refused call returns, so once a command has exited nothing
// it was refused is missing.
func (w *refusalWatch) result() []Refusal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Refusal(nil), w.list...)
}

// connectTarget reads the address a notified connect goes to and returns
// it as address:port when it is an IP address off the loopback, else "".
func connectTarget(req seccompNotif) string {
	size := min(req.Args[2], 128)
	if size < 4 {
		return ""
	}
	f, err := os.Open("/proc/" + strconv.Itoa(int(req.Pid)) + "/mem")
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, size)
	if n, err := f.ReadAt(b, int64(req.Args[1])); err != nil && n < int(size) {
		return ""
	}
	var addr netip.Addr
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if size < 8 {
			return ""
		}
		addr = netip.AddrFrom4([4]byte(b[4:8]))
	case unix.AF_INET6:
		if size < 24 {
			return ""
		}
		addr = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
	default:
		return ""
	}
	if addr.IsLoopback() || addr.IsUnspecified() {
		return ""
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(addr, port).String()
}

// syscallName names the system calls the filter hands to the watch.
func syscallName(nr int32) string {
	names := map[int32]string{
		unix.SYS_UNSHARE: "unshare", unix.SYS_SETNS: "setns", unix.SYS_MOUNT: "mount", unix.SYS_UMOUNT2: "umount2",
		unix.SYS_PIVOT_ROOT: "pivot_root", unix.SYS_MOUNT_SETATTR: "mount_setattr", unix.SYS_MOVE_MOUNT: "move_mount",
		unix.SYS_OPEN_TREE: "open_tree", unix.SYS_FSOPEN: "fsopen", unix.SYS_FSMOUNT: "fsmount",
		unix.SYS_FSCONFIG: "fsconfig", unix.SYS_FSPICK: "fspick", unix.SYS_CHROOT: "chroot",
		unix.SYS_CLONE: "clone", unix.SYS_PTRACE: "ptrace",
	}
	if n, ok := names[nr]; ok {
		return n
	}
	return "syscall " + strconv.Itoa(int(nr))
}

// refusalLine is how an init appends the refusals to its report.
func refusalLine(rs []Refusal) string {
	if len(rs) == 0 {
		return ""
	}
	b, _ := json.Marshal(rs)
	return "\nrefused " + string(b)
}

// splitReport separates an init's report from the refusals that follow it.
func splitReport(msg string) (string, []Refusal) {
	status, rest, _ := strings.Cut(msg, "\n")
	var rs []Refusal
	if j, ok := strings.CutPrefix(strings.TrimSpace(rest), "refused "); ok {
		if err := json.Unmarshal([]byte(j), &rs); err != nil {
			rs = []Refusal{{Kind: "syscall", Call: fmt.Sprintf("unreadable report: %v", err), Count: 1}}
		}
	}
	return strings.TrimSpace(status), rs
}
