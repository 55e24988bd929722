package exec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sandbox confines a command to new Linux namespaces (mount, PID, IPC, UTS
// and, unless Network is set, network) with a root of its own: a tmpfs that
// holds only Binds, a private size-capped /tmp, a minimal /dev and its own
// /proc. The command runs as root without any capability, with
// no_new_privs, under a seccomp filter that refuses new namespaces and
// mounts; whatever it leaves running dies with it, because it is not the
// namespace's init (see sandboxInit).
type Sandbox struct {
	// Binds are the host paths the command sees, each at the same path.
	// A path that does not exist on the host is skipped; a symlink is
	// recreated as the same symlink (so /bin -> usr/bin keeps working).
	Binds []Bind
	// Hide are host paths covered by an empty read-only directory even
	// where a bind would show them (the worker's home under a bound /opt);
	// binds below a hidden path still appear.
	Hide []string
	// Network keeps the host's network namespace. Without it the command
	// has a network namespace of its own with only a loopback interface.
	Network bool
	// TmpSize caps the private /tmp in bytes; 0 = DefaultTmpSize.
	TmpSize int64
	// Limits are applied through cgroups where the machine has them.
	Limits Limits
	// Pool, if set, runs the command from a sandbox init kept alive
	// between runs (zygote_linux.go) instead of starting one for it,
	// unless Network is set. The sandbox is the same either way.
	Pool *Pool
}

// Bind is one host path made visible inside a sandbox.
type Bind struct {
	Path     string `json:"path"` // absolute host path, also the path inside
	Writable bool   `json:"writable,omitempty"`
}

// DefaultTmpSize caps a sandbox's /tmp when Sandbox.TmpSize is 0.
const DefaultTmpSize = 1 << 30

// ErrSandbox is wrapped by Run when the sandbox could not be built: the
// kernel refused the namespaces, a bind failed, a limit could not be set.
// Nothing of the command ran.
var ErrSandbox = errors.New("sandbox unavailable")

// SystemBinds returns read-only binds of the system directories and the
// few files of /etc that programs need (users, name resolution, TLS roots,
// the dynamic linker's cache, Debian's alternatives). A fresh slice is
// returned on every call.
func SystemBinds() []Bind {
	paths := []string{
		"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
		"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf",
		"/etc/host.conf", "/etc/localtime", "/etc/ssl", "/etc/ca-certificates", "/etc/pki",
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
		"/etc/gitconfig", "/etc/mime.types", "/etc/protocols", "/etc/services",
	}
	binds := make([]Bind, len(paths))
	for i, p := range paths {
		binds[i] = Bind{Path: p}
	}
	return binds
}

// initEnv marks a process started by Run as a sandbox's init: the avfs
// binary (or a test binary) re-executed through /proc/self/exe, which sets
// up the namespaces it was cloned into and then starts the command. Its
// value is the protocol version, so that an init from another build
// refuses instead of misreading its configuration.
const (
	initEnv     = "AVFS_SANDBOX_INIT"
	initVersion = "1"
)

// File descriptors of a sandbox init: its configuration (read to EOF) and
// the status it reports before exiting.
const (
	initConfigFD = 3
	initStatusFD = 4
)

// initCalled records that this binary's entry point called Init, so that
// Run refuses to re-execute a binary that would not become an init (a test
// binary without the TestMain would run its whole suite again, inside the
// sandbox). It is process-wide by nature: it says what main did.
var initCalled atomic.Bool

// Init turns this process into a sandbox's init if Run started it as one;
// it then never returns. Otherwise it returns at once. Run starts a
// sandbox's init by re-executing /proc/self/exe, so every binary that runs
// sandboxed commands calls Init first thing in main, and every test binary
// that does in TestMain; Run refuses with ErrSandbox in one that did not.
func Init() {
	if v, ok := os.LookupEnv(initEnv); ok {
		if v == zygoteVersion {
			zygoteMain()
		}
		sandboxInit(v)
	}
	initCalled.Store(true)
}

// errNoInit is why a sandbox cannot be started from a binary whose entry
// point did not call Init.
var errNoInit = errors.New("this binary's main (or TestMain) does not call exec.Init")

// initConfig is what Run tells a sandbox init.
type initConfig struct {
	Path    string   `json:"path"` // program, looked up along the command's PATH inside
	Args    []string `json:"args"`
	Dir     string   `json:"dir"`
	Env     []string `json:"env"`
	Root    string   `json:"root"` // an empty host directory to build the root on
	Binds   []Bind   `json:"binds"`
	Hide    []string `json:"hide"`
	Network bool     `json:"network"`
	TmpSize int64    `json:"tmp_size"`
	Cgroups []string `json:"cgroups"` // cgroup.procs files to join before anything else
	// Points are mount points made empty in the root, where a zygote's
	// runs attach their writable binds.
	Points []mountPoint `json:"points,omitempty"`
}

// mountPoint is an empty directory (or file) made for a later mount.
type mountPoint struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir"`
}

// sandboxRun is one sandboxed command on the Run side.
type sandboxRun struct {
	status *os.File // read end of the init's status pipe
	cg     *cgroup  // nil without limits
	locked bool     // the goroutine is locked to its thread until close
}

// rootDir is the mount point every sandbox builds its root on. It stays
// empty on the host: each init mounts a tmpfs on it in its own mount
// namespace, and mounts never propagate back.
var rootDir = sync.OnceValues(func() (string, error) {
	d := filepath.Join(os.TempDir(), ".avfs-sandbox-root")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	return d, nil
})

// prepare turns cmd, built for the host, into the start of a sandbox init
// that will run it. dir is the command's working directory (entered by the
// init's child, never by a vfork'd child of this process: see EnterDir).
func (sb *Sandbox) prepare(cmd *osexec.Cmd, dir string) (*sandboxRun, error) {
	if !initCalled.Load() {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, errNoInit)
	}
	root, err := rootDir()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	cfg := initConfig{
		Path: cmd.Path, Args: cmd.Args, Dir: dir, Env: cmd.Env, Root: root,
		Binds: sb.Binds, Hide: sb.Hide, Network: sb.Network, TmpSize: sb.TmpSize,
	}
	if cfg.TmpSize == 0 {
		cfg.TmpSize = DefaultTmpSize
	}
	// Pdeathsig below fires when the thread that forked the init exits;
	// keeping this goroutine on its thread until the run ends keeps the
	// runtime from retiring that thread (golang/go#27505).
	runtime.LockOSThread()
	run := &sandboxRun{locked: true}
	if !sb.Limits.zero() {
		if run.cg, err = newCgroup(sb.Limits); err != nil {
			run.close()
			return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
		}
		cfg.Cgroups = run.cg.procs
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		run.close()
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		run.close()
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		run.close()
		return nil, err
	}
	// A configuration larger than the pipe buffer would block here; a
	// goroutine keeps that from mattering.
	go func() { cfgW.Write(b); cfgW.Close() }()
	run.status = statusR
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if !sb.Network {
		flags |= unix.CLONE_NEWNET
	}
	cmd.Path, cmd.Args, cmd.Dir = "/proc/self/exe", []string{"avfs-sandbox"}, "/"
	// One P keeps the init small and its thread count (which a pids
	// limit counts) well under initThreads on any machine.
	cmd.Env = []string{initEnv + "=" + initVersion, "GOMAXPROCS=1"}
	cmd.ExtraFiles = []*os.File{cfgR, statusW}
	cmd.SysProcAttr.Cloneflags = flags
	// The init dies with the worker, and the whole PID namespace with it.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return run, nil
}

// started lets go of the ends of the pipes that the init now holds.
func (r *sandboxRun) started(cmd *osexec.Cmd) {
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
}

// finish reads what the init reported after it exited and applies it to
// res. An init that was killed (SIGKILL after the grace period) reports
// nothing; its own status then stands, as for an unsandboxed leader. One
// that exited without a report was stopped while it started: the Go
// runtime exits (status 2, as PID 1 it cannot die of the signal) on a
// SIGTERM that comes before Init handles signals. The command never ran;
// it ends as if it had got the signal at once, as when the init catches
// it (sandboxInit).
func (r *sandboxRun) finish(res *Result) error {
	defer r.close()
	b, _ := readAll(r.status)
	msg, refused := splitReport(string(b))
	res.Refused = refused
	if r.cg != nil {
		res.Limit = r.cg.hit()
	}
	if msg != "" {
		return applyReport(msg, res)
	}
	if res.ExitCode == nil {
		return nil // killed
	}
	if !res.TimedOut && !res.Canceled {
		return fmt.Errorf("%w: init exited with status %d without a report", ErrSandbox, *res.ExitCode)
	}
	res.ExitCode, res.Signal = nil, signalName(syscall.SIGTERM)
	return nil
}

// applyReport applies an init's report on how the command ended to res:
// "exit N" and "signal N" set the status; "setup ..." (the sandbox could
// not be built) is ErrSandbox, "start ..." the error starting the
// command.
func applyReport(msg string, res *Result) error {
	kind, val, _ := strings.Cut(msg, " ")
	n, err := strconv.Atoi(val)
	switch {
	case kind == "exit" && err == nil:
		res.ExitCode, res.Signal = &n, ""
	case kind == "signal" && err == nil:
		res.ExitCode, res.Signal = nil, signalName(syscall.Signal(n))
	case kind == "setup":
		return fmt.Errorf("%w: %s", ErrSandbox, val)
	case kind == "start":
		return errors.New(val)
	default:
		return fmt.Errorf("%w: init reported %q", ErrSandbox, msg)
	}
	return nil
}

func (r *sandboxRun) close() {
	if r.locked {
		runtime.UnlockOSThread()
		r.locked = false
	}
	if r.status != nil {
		r.status.Close()
	}
	if r.cg != nil {
		r.cg.remove()
	}
}

func readAll(f *os.File) ([]byte, error) {
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil || len(out) > 64<<10 {
			return out, err
		}
	}
}

func signalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(s))
}

// sandboxInit is the whole life of a sandbox init; it never returns. It
// runs as PID 1 of the new PID namespace, so that the command is not:
// signals reach the command with their normal meaning (the kernel drops
// signals without a handler sent to a namespace's init), orphans are
// reaped, and when the command ends the init exits and the kernel kills
// everything else in the namespace.
func sandboxInit(version string) {
	if os.Getpid() != 1 {
		// Someone set the variable by hand; this is not a sandbox.
		fmt.Fprintln(os.Stderr, "avfs: "+initEnv+" is reserved for the sandbox")
		os.Exit(127)
	}
	// From here on, a signal Run sends the group (a timeout's SIGTERM)
	// must not end the init before it has reported: the command gets
	// such signals itself.
	sigs := catchSignals()
	// The command must not inherit the pipes: it could forge the report.
	syscall.CloseOnExec(initConfigFD)
	syscall.CloseOnExec(initStatusFD)
	status := os.NewFile(initStatusFD, "status")
	report := func(format string, args ...any) {
		fmt.Fprintf(status, format, args...)
		os.Exit(0)
	}
	if version != initVersion {
		report("setup init protocol %q, want %q (binary replaced while running?)", version, initVersion)
	}
	var cfg initConfig
	if err := json.NewDecoder(os.NewFile(initConfigFD, "config")).Decode(&cfg); err != nil {
		report("setup read config: %v", err)
	}
	// Credentials and the seccomp filter are per thread: set them on the
	// thread that forks the command.
	lockThread()
	if err := setupRoot(cfg); err != nil {
		report("setup %v", err)
	}
	listener, err := confine(!cfg.Network)
	if err != nil {
		report("setup %v", err)
	}
	watch := watchRefusals(listener)
	path, err := lookPath(cfg.Path, cfg.Env)
	if err != nil {
		report("start %v", err)
	}
	// Stopped (a timeout, a cancel) while setting up: the command ends
	// as if it had been started and got the signal at once.
	if sig := pendingStop(sigs); sig != 0 {
		report("signal %d", int(sig))
	}
	pid, err := syscall.ForkExec(path, cfg.Args, &syscall.ProcAttr{
		Dir: cfg.Dir, Env: cfg.Env, Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		report("start %s: %v", cfg.Path, err)
	}
	// One that came during the fork may have missed the command.
	if sig := pendingStop(sigs); sig != 0 {
		syscall.Kill(pid, sig)
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			report("setup wait: %v", err)
		}
		if got != pid {
			continue // an orphan of the command, reaped
		}
		refused := refusalLine(watch.result())
		if ws.Signaled() {
			report("signal %d%s", int(ws.Signal()), refused)
		}
		report("exit %d%s", ws.ExitStatus(), refused)
	}
}

// setupRoot builds the command's root and enters it. Invariants: no mount
// made here propagates to the host (everything is made private first);
// nothing of the host is reachable afterwards but cfg.Binds (the old root
// is detached); /proc is the new PID namespace's, with its kernel knobs
// read-only.
func setupRoot(cfg initConfig) error {
	for _, p := range cfg.Cgroups {
		// "0" is the writing process; the command inherits it.
		if err := os.WriteFile(p, []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := cfg.Root
	if err := unix.Mount("avfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	// The private /tmp and the hidden paths are mounts too, in order with
	// the binds: a parent sorts before its children, so nothing mounted
	// later covers an earlier mount.
	type entry struct {
		Bind
		tmpfs string      // tmpfs options, "" for a bind
		point *mountPoint // a mount point to make, not a mount
	}
	mounts := []entry{{Bind: Bind{Path: "/tmp"}, tmpfs: fmt.Sprintf("mode=1777,size=%d", cfg.TmpSize)}}
	for _, h := range cfg.Hide {
		mounts = append(mounts, entry{Bind: Bind{Path: filepath.Clean(h)}, tmpfs: "mode=0755,size=64k"})
	}
	for _, b := range cfg.Binds {
		mounts = append(mounts, entry{Bind: b})
	}
	for _, p := range cfg.Points {
		mounts = append(mounts, entry{Bind: Bind{Path: filepath.Clean(p.Path)}, point: &p})
	}
	slices.SortStableFunc(mounts, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	var hidden []string
	for _, m := range mounts {
		if m.point != nil {
			if err := makePoint(root, *m.point); err != nil {
				return err
			}
			continue
		}
		if m.tmpfs == "" {
			if err := bind(root, m.Bind); err != nil {
				return err
			}
			continue
		}
		dst := filepath.Join(root, m.Path)
		if m.Path != "/tmp" {
			if _, err := os.Lstat(dst); err != nil {
				continue // not visible anyway
			}
			hidden = append(hidden, dst)
		}
		if err := mkdirMount("avfs-tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, m.tmpfs); err != nil {
			return fmt.Errorf("mount %s: %w", m.Path, err)
		}
	}
	for _, dst := range hidden {
		if err := unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("hide %s: %w", dst, err)
		}
	}
	if err := setupDev(root); err != nil {
		return err
	}
	if err := setupProc(root); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("avfs")); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	if !cfg.Network {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("root read-only: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root under the new one; the
	// detach then removes it without needing a directory for it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// bind makes b.Path of the host visible at the same path under root.
func bind(root string, b Bind) error {
	if !filepath.IsAbs(b.Path) {
		return fmt.Errorf("bind %q: not absolute", b.Path)
	}
	src := filepath.Clean(b.Path)
	dst := filepath.Join(root, src)
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		if err := os.Symlink(target, dst); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		return nil
	}
	if fi.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else {
		var f *os.File
		if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !b.Writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	// Recursive, so that a mount below a read-only bind is read-only too.
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("bind %s read-only: %w", src, err)
	}
	return nil
}

// makePoint makes an empty directory or file at p.Path under root.
func makePoint(root string, p mountPoint) error {
	if !filepath.IsAbs(p.Path) {
		return fmt.Errorf("bind %q: not absolute", p.Path)
	}
	dst := filepath.Join(root, p.Path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("mount point %s: %w", p.Path, err)
	}
	if p.Dir {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", p.Path, err)
		}
		return nil
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", p.Path, err)
	}
	return f.Close()
}

func mkdirMount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	return unix.Mount(source, target, fstype, flags, data)
}

// setupDev gives the sandbox the harmless devices of the host, a private
// /dev/shm and its own pseudo-terminal instance.
func setupDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := mkdirMount("avfs-dev", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, name)
		f, err := os.Create(p)
		if err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
		f.Close()
		if err := unix.Mount("/dev/"+name, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	if err := mkdirMount("avfs-shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := mkdirMount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	return nil
}

// setupProc mounts the PID namespace's own /proc. The command runs as
// uid 0, and sysctl files check the uid, not capabilities: the kernel's
// knobs must be read-only, and the files that expose host memory hidden.
func setupProc(root string) error {
	proc := filepath.Join(root, "proc")
	if err := mkdirMount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, p := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		p = filepath.Join(proc, p)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("/proc read-only: %w", err)
		}
		if err := unix.MountSetattr(-1, p, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("/proc read-only: %w", err)
		}
	}
	for _, p := range []string{"kcore", "keys", "timer_list", "sched_debug", "kallsyms"} {
		p = filepath.Join(proc, p)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	return nil
}

// loopbackUp brings up the new network namespace's only interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
