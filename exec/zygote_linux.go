package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A zygote is a sandbox init kept alive between runs: started once for a
// layout (the read-only binds, the hidden paths and the mount points of
// the writable binds), PID 1 of its own PID namespace with the root built
// once. For each run it unshares a mount and an IPC namespace on a fresh
// thread, mounts a private /tmp and /dev/shm there, attaches the run's
// writable binds (the vault's mount, passed as detached mounts), joins
// the run's cgroups, confines the thread and forks the command from it.
// The first part (thread, namespaces, /tmp, /dev/shm) depends on nothing
// in the request but /tmp's size, so it is done ahead: once the zygote
// is ready and again after each run it reports, a thread waits with them
// built (a runSlot); a request whose /tmp size differs gets a new one.
// When the command's leader exits it kills everything else in its PID
// namespace, reaps it and reports; so it runs one command at a time.
// Signals for the command (a timeout's SIGTERM and SIGKILL) go through
// it, to the command's process group.
//
// The protocol, on a SOCK_SEQPACKET socket: Run sends {"op":"run"} with
// the command and, as SCM_RIGHTS, its stdin, stdout, stderr, one detached
// mount per writable bind and the cgroup.procs files to join and to
// return to; then {"op":"signal"} as needed. The zygote answers "ready"
// once, then per run "started" (or "setup ..."/"start ...") and the final
// "exit N" or "signal N", followed by a "refused [...]" line when the
// sandbox refused the command something. Before giving an idle zygote a
// command, Run checks through its pidfd that it has not exited (it used
// to ping it: a round trip through two schedulers on every command,
// docs/decisions.md §38).
const zygoteVersion = "zygote-1"

// File descriptor of a zygote's socket (its configuration comes on
// initConfigFD, as for a one-shot init).
const zygoteSockFD = 4

// Pool limits.
const (
	zygoteMaxIdlePerLayout = 2
	zygoteMaxIdle          = 32
	zygoteIdleTimeout      = 10 * time.Minute
	// zygoteKillWait bounds how long Run waits for a zygote's report after
	// SIGKILL; one that does not answer by then is killed itself.
	zygoteKillWait = 10 * time.Second
)

// Pool keeps zygotes, sandbox inits that stay alive between runs, so
// that a sandboxed command costs a fork and an exec instead of the start
// of a Go binary and a namespace's setup and teardown. A Sandbox with a
// Pool runs its command from an idle zygote of the same layout (a layout
// is every field of Sandbox but Limits and Pool, with the writable binds
// as mount points), starting one when there is none. Runs with Network
// never use it: a network namespace of the host's cannot be a run's
// alone. Zygotes die with the process and with Close.
type Pool struct {
	mu     sync.Mutex
	idle   []*zygote // least recently used first
	closed bool
	spawn  chan func()
	quit   chan struct{}
}

// NewPool returns an empty pool; Close it when done.
func NewPool() *Pool {
	p := &Pool{spawn: make(chan func()), quit: make(chan struct{})}
	started := make(chan struct{})
	go p.spawner(started)
	<-started
	return p
}

// spawner starts every zygote of the pool from one thread that lives as
// long as the pool: a zygote's Pdeathsig fires when the thread that
// forked it exits (golang/go#27505), which is then on Close.
func (p *Pool) spawner(started chan struct{}) {
	runtime.LockOSThread() // never unlocked: the thread ends with the pool
	close(started)
	for {
		select {
		case f := <-p.spawn:
			f()
		case <-p.quit:
			return
		}
	}
}

// Close kills every zygote of the pool; those running a command end it
// by SIGKILL. Runs that start later start their own init.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, z := range idle {
		z.kill()
	}
	close(p.quit)
}

// open reports whether the pool has not been closed.
func (p *Pool) open() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// Idle is the number of zygotes waiting for a run.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// zygote is one kept init, on the Run side.
type zygote struct {
	key  string
	cmd  *osexec.Cmd
	conn *net.UnixConn
	msgs chan string   // its reports, closed when the socket is
	dead chan struct{} // closed once it has exited
	idle *time.Timer   // expires it while idle

	// pidfd refers to the zygote's process (opened before anything could
	// reap it), -1 once it has been reaped; it says whether the zygote has
	// exited at the instant it is asked, where dead may lag behind.
	pidMu sync.Mutex
	pidfd int
}

func (z *zygote) kill() {
	z.cmd.Process.Kill()
	z.conn.Close()
}

func (z *zygote) alive() bool {
	select {
	case <-z.dead:
		return false
	default:
		return true
	}
}

// exited reports whether z's process has exited or is exiting, or is
// stopped (SIGSTOP, a tracer): one that cannot serve a run now. It asks
// the kernel, so it cannot miss a death that z.dead has not caught up
// with yet: the pidfd polls readable once every thread has exited, and
// before that the main thread is a zombie as soon as it has exited (a
// killed zygote, PID 1 of its namespace, then waits for the kernel to
// kill every process in the namespace). A stopped zygote would start
// nothing and report nothing until the run's timeout.
func (z *zygote) exited() bool {
	if !z.alive() {
		return true
	}
	z.pidMu.Lock()
	defer z.pidMu.Unlock()
	if z.pidfd < 0 {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(z.pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n > 0 {
			return true
		}
		break
	}
	// Not reaped (its pidfd was not readable a moment ago), so the pid is
	// still the zygote's.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(z.cmd.Process.Pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command name
	if i < 0 || i+2 >= len(b) {
		return true
	}
	switch b[i+2] {
	case 'Z', 'X', 'T', 't':
		return true
	}
	return false
}

// layout splits sb into what a zygote is built with and the binds
// attached per run.
func layout(sb *Sandbox) (initConfig, []Bind, string, error) {
	cfg := initConfig{Hide: sb.Hide}
	var perRun []Bind
	for _, b := range sb.Binds {
		if !b.Writable {
			cfg.Binds = append(cfg.Binds, b)
			continue
		}
		fi, err := os.Lstat(b.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // skipped, as bind does
		case err != nil:
			return cfg, nil, "", fmt.Errorf("bind %s: %w", b.Path, err)
		case !fi.IsDir() && !fi.Mode().IsRegular():
			cfg.Binds = append(cfg.Binds, b) // a symlink, recreated by bind
			continue
		}
		if !filepath.IsAbs(b.Path) {
			return cfg, nil, "", fmt.Errorf("bind %q: not absolute", b.Path)
		}
		cfg.Points = append(cfg.Points, mountPoint{Path: filepath.Clean(b.Path), Dir: fi.IsDir()})
		perRun = append(perRun, b)
	}
	key, err := json.Marshal(cfg)
	return cfg, perRun, string(key), err
}

// get takes an idle zygote of the layout or starts one.
func (p *Pool) get(ctx context.Context, cfg initConfig, key string) (*zygote, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("sandbox pool closed")
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		z := p.idle[i]
		if z.key != key {
			continue
		}
		p.idle = slices.Delete(p.idle, i, i+1)
		z.idle.Stop()
		p.mu.Unlock()
		if !z.exited() {
			return z, nil
		}
		z.kill() // it died or was stopped while idle: the OOM killer, an operator
		p.mu.Lock()
		i = len(p.idle) // the list may have changed meanwhile
	}
	p.mu.Unlock()
	return p.start(ctx, cfg, key)
}

// put returns z to the idle list, or kills it when the pool is closed or
// full.
func (p *Pool) put(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !z.alive() {
		z.kill()
		return
	}
	same := 0
	for _, o := range p.idle {
		if o.key == z.key {
			same++
		}
	}
	if same >= zygoteMaxIdlePerLayout {
		z.kill()
		return
	}
	if len(p.idle) >= zygoteMaxIdle {
		p.idle[0].idle.Stop()
		p.idle[0].kill()
		p.idle = p.idle[1:]
	}
	p.idle = append(p.idle, z)
	z.idle = time.AfterFunc(zygoteIdleTimeout, func() { p.expire(z) })
}

func (p *Pool) expire(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.idle, z); i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
		z.kill()
	}
}

// start starts a zygote for cfg and waits until its root is built.
func (p *Pool) start(ctx context.Context, cfg initConfig, key string) (*zygote, error) {
	if !initCalled.Load() {
		return nil, errNoInit
	}
	root, err := rootDir()
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	cfg.TmpSize = 64 << 10 // the zygote's own; each run mounts its own
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	conn := c.(*net.UnixConn)
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, err
	}
	go func() { cfgW.Write(b); cfgW.Close() }()
	// GOMAXPROCS=2, not 1 as a one-shot init: a run passes from the
	// goroutine reading the socket to the main goroutine and the run's
	// thread (both locked to their threads), and the reaper and the
	// refusal watch run beside them; with one P every such step waits for
	// the P to be handed over between threads. A second P took about 0.8
	// ms off `true` (BenchmarkTrue, kept init: 2.8 against 3.6 ms wall)
	// for a few tens of kB per zygote.
	cmd := &osexec.Cmd{
		Path: "/proc/self/exe", Args: []string{"avfs-sandbox"}, Dir: "/",
		Env:        []string{initEnv + "=" + zygoteVersion, "GOMAXPROCS=2"},
		ExtraFiles: []*os.File{cfgR, theirs},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL,
			Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET},
	}
	errc := make(chan error, 1)
	select {
	case p.spawn <- func() { errc <- cmd.Start() }:
		err = <-errc
	case <-p.quit:
		err = errors.New("sandbox pool closed")
	}
	cfgR.Close()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("new namespaces: %w", err)
	}
	z := &zygote{key: key, cmd: cmd, conn: conn, msgs: make(chan string, 4), dead: make(chan struct{}), pidfd: -1}
	// Opened before the Wait below can reap it: the pid names our child.
	if fd, err := unix.PidfdOpen(cmd.Process.Pid, unix.PIDFD_NONBLOCK); err == nil { // close-on-exec
		z.pidfd = fd
	} else {
		z.kill()
		go cmd.Wait()
		return nil, fmt.Errorf("pidfd of the sandbox init: %w", err)
	}
	go func() {
		cmd.Wait()
		z.pidMu.Lock()
		unix.Close(z.pidfd)
		z.pidfd = -1
		z.pidMu.Unlock()
		close(z.dead)
	}()
	go z.read()
	select {
	case m, ok := <-z.msgs:
		if ok && m == "ready" {
			return z, nil
		}
		z.kill()
		if kind, val, _ := strings.Cut(m, " "); kind == "setup" {
			return nil, errors.New(val)
		}
		return nil, fmt.Errorf("sandbox init exited while starting (%q)", m)
	case <-ctx.Done():
		z.kill()
		return nil, ctx.Err()
	}
}

// read passes z's reports to z.msgs until the socket closes.
func (z *zygote) read() {
	defer close(z.msgs)
	buf := make([]byte, 64<<10)
	for {
		n, _, _, _, err := z.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
		z.msgs <- string(buf[:n])
	}
}

// zygoteRequest is what Run sends a zygote.
type zygoteRequest struct {
	Op      string   `json:"op"` // run | signal
	Signal  int      `json:"signal,omitempty"`
	Path    string   `json:"path,omitempty"`
	Args    []string `json:"args,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Env     []string `json:"env,omitempty"`
	TmpSize int64    `json:"tmp_size,omitempty"`
	Binds   []string `json:"binds,omitempty"`   // where the detached mounts after stdio go
	Cgroups int      `json:"cgroups,omitempty"` // cgroup.procs fds to join, then as many to return to
}

func (z *zygote) send(r zygoteRequest, files []int) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		oob = unix.UnixRights(files...)
	}
	_, _, err = z.conn.WriteMsgUnix(b, oob, nil)
	return err
}

// run is Run for a sandbox with a pool: s is validated and has its
// defaults.
func (p *Pool) run(ctx context.Context, s Spec, res Result) (Result, error) {
	startErr := func(err error) (Result, error) {
		res.Duration = time.Since(res.StartedAt)
		return res, fmt.Errorf("%w: %w", ErrStart, err)
	}
	path, args := "/bin/sh", []string{"sh", "-c", s.Shell}
	if s.Shell == "" {
		path, args = s.Argv[0], s.Argv
	}
	env := s.Env
	if env == nil {
		env = []string{}
	}
	cfg, perRun, key, err := layout(s.Sandbox)
	if err != nil {
		return startErr(fmt.Errorf("%w: %w", ErrSandbox, err))
	}
	z, err := p.get(ctx, cfg, key)
	if err != nil && ctx.Err() != nil {
		// Canceled while the init started: nothing of the command ran.
		res.Canceled, res.Duration = true, time.Since(res.StartedAt)
		return res, nil
	}
	if err != nil {
		return startErr(fmt.Errorf("%w: %w", ErrSandbox, err))
	}
	// Back to the pool if it never got the run or served it to the end.
	sent, healthy := false, false
	defer func() {
		if healthy || !sent {
			p.put(z)
		} else {
			z.kill()
		}
	}()
	req := zygoteRequest{Op: "run", Path: path, Args: args, Dir: s.Dir, Env: env, TmpSize: s.Sandbox.TmpSize}
	if req.TmpSize == 0 {
		req.TmpSize = DefaultTmpSize
	}
	var closeLater []int
	defer func() {
		for _, fd := range closeLater {
			unix.Close(fd)
		}
	}()
	// stdin, stdout, stderr, the binds, the cgroups: the order the
	// zygote reads them in.
	var stdin *os.File
	var feeder *stdinFeeder
	switch in := s.Stdin.(type) {
	case nil:
		if stdin, err = os.Open(os.DevNull); err != nil {
			return startErr(err)
		}
		defer stdin.Close()
		feeder = &stdinFeeder{}
	case *os.File:
		stdin, feeder = in, &stdinFeeder{}
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return startErr(fmt.Errorf("stdin pipe: %w", err))
		}
		stdin, feeder = r, &stdinFeeder{src: in, r: r, w: w}
	}
	cp, err := newCapture()
	if err != nil {
		feeder.Close()
		return startErr(err)
	}
	files := []int{int(stdin.Fd()), int(cp.outW.Fd()), int(cp.errW.Fd())}
	for _, b := range perRun {
		fd, err := unix.OpenTree(unix.AT_FDCWD, b.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			cp.abort()
			feeder.Close()
			return startErr(fmt.Errorf("%w: bind %s: %w", ErrSandbox, b.Path, err))
		}
		closeLater = append(closeLater, fd)
		files = append(files, fd)
		req.Binds = append(req.Binds, filepath.Clean(b.Path))
	}
	var cg *cgroup
	if !s.Sandbox.Limits.zero() {
		if cg, err = newCgroup(s.Sandbox.Limits); err != nil {
			cp.abort()
			feeder.Close()
			return startErr(fmt.Errorf("%w: %w", ErrSandbox, err))
		}
		defer cg.remove()
		var join, home []int
		for _, procs := range cg.procs {
			for i, f := range []string{procs, filepath.Join(filepath.Dir(filepath.Dir(procs)), "cgroup.procs")} {
				fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					cp.abort()
					feeder.Close()
					return startErr(fmt.Errorf("%w: cgroup: %w", ErrSandbox, err))
				}
				closeLater = append(closeLater, fd)
				if i == 0 {
					join = append(join, fd)
				} else {
					home = append(home, fd)
				}
			}
		}
		files = append(append(files, join...), home...)
		req.Cgroups = len(join)
	}
	err = z.send(req, files)
	sent = true
	for _, fd := range closeLater {
		unix.Close(fd) // the zygote has its own copies now
	}
	closeLater = nil
	cp.started()
	if err != nil {
		cp.abort()
		feeder.Close()
		return startErr(fmt.Errorf("%w: %w", ErrSandbox, err))
	}
	feeder.start()
	cp.drain(s)

	// Wait for the report; stop the command on a timeout or a cancel
	// through the zygote, which signals its group.
	signal := func(sig syscall.Signal) { z.send(zygoteRequest{Op: "signal", Signal: int(sig)}, nil) }
	timer := time.NewTimer(s.Timeout)
	defer timer.Stop()
	stop := func() <-chan time.Time {
		signal(syscall.SIGTERM)
		return time.After(s.Grace)
	}
	var deadline, grace, killWait <-chan time.Time
	deadline, done := timer.C, ctx.Done()
	report := ""
wait:
	for {
		select {
		case m, ok := <-z.msgs:
			if !ok {
				break wait // the zygote died, and the command with it
			}
			if m == "started" {
				continue
			}
			report = m
			break wait
		case <-deadline:
			res.TimedOut, deadline, done = true, nil, nil
			grace = stop()
		case <-done:
			res.Canceled, deadline, done = true, nil, nil
			grace = stop()
		case <-grace:
			signal(syscall.SIGKILL)
			grace, killWait = nil, time.After(zygoteKillWait)
		case <-killWait:
			z.kill() // not answering: its namespace dies with it
			killWait = nil
		}
	}
	feeder.Close()
	cp.finish(&res)
	res.Duration = time.Since(res.StartedAt)
	if cg != nil {
		res.Limit = cg.hit()
	}
	report, res.Refused = splitReport(report)
	if report == "" {
		// The zygote died (killed by the memory limit's OOM killer, or
		// by us): so did everything in its namespace.
		res.ExitCode, res.Signal = nil, signalName(syscall.SIGKILL)
		return res, nil
	}
	kind, _, _ := strings.Cut(report, " ")
	healthy = kind == "exit" || kind == "signal" || kind == "start" // it served the run
	if err := applyReport(report, &res); err != nil {
		return startErr(err)
	}
	return res, nil
}

// zygoteMain is the whole life of a zygote; it never returns.
func zygoteMain() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "avfs: "+initEnv+" is reserved for the sandbox")
		os.Exit(127)
	}
	// The main thread stays the main goroutine's: a run's goroutine ends
	// locked to its thread so that the thread, in the run's mount
	// namespace, exits with it, and the runtime never lets the main thread
	// exit (it would stay, wedged, holding the run's mounts).
	runtime.LockOSThread()
	catchSignals() // PID 1: none may end it; the commands get their own
	syscall.CloseOnExec(initConfigFD)
	syscall.CloseOnExec(zygoteSockFD)
	// Commands run as root without capabilities: they must not reach the
	// zygote's memory or descriptors through /proc/1 or ptrace.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	f := os.NewFile(zygoteSockFD, "sock")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		os.Exit(1)
	}
	conn := c.(*net.UnixConn)
	say := func(format string, args ...any) {
		conn.WriteMsgUnix([]byte(fmt.Sprintf(format, args...)), nil, nil)
	}
	var cfg initConfig
	if err := json.NewDecoder(os.NewFile(initConfigFD, "config")).Decode(&cfg); err != nil {
		say("setup read config: %v", err)
		os.Exit(0)
	}
	if err := setupRoot(cfg); err != nil {
		say("setup %v", err)
		os.Exit(0)
	}
	msgs := make(chan zygoteMsg, 16)
	go func() {
		buf, oob := make([]byte, 1<<20), make([]byte, 4096)
		for {
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil || n == 0 {
				os.Exit(0) // Run let go: the kernel kills the namespace
			}
			var m zygoteMsg
			if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, cm := range cms {
					if fds, err := unix.ParseUnixRights(&cm); err == nil {
						m.files = append(m.files, fds...)
					}
				}
			}
			for _, fd := range m.files {
				syscall.CloseOnExec(fd)
			}
			if json.Unmarshal(buf[:n], &m.req) != nil {
				m.req.Op = ""
			}
			msgs <- m
		}
	}()
	under := underTmp(cfg)
	say("ready")
	// The first run's thread and namespaces are built while Run hands
	// the zygote to its caller; each later one while the caller reads
	// the report of the run before.
	next := newRunSlot(DefaultTmpSize, under)
	for m := range msgs {
		if m.req.Op != "run" {
			closeFDs(m.files) // a signal for a run that has ended
			continue
		}
		next = zygoteServe(m, under, say, msgs, next)
	}
}

// runSlot is the thread of the next run, made ahead of its request: locked
// (it ends with its goroutine and is never given back to the runtime), in
// a mount and an IPC namespace of its own, with a fresh /tmp of size and a
// fresh /dev/shm (newRunView). Nothing else is in those namespaces: what
// the run before left in its own died with it (its report is sent once
// every process of it has been reaped, and the slot is made after that).
// What depends on the request is done once it comes: the writable binds,
// the cgroups, the confinement, the command.
type runSlot struct {
	size int64
	work chan func(setupErr error)
}

func newRunSlot(size int64, under []string) *runSlot {
	s := &runSlot{size: size, work: make(chan func(error), 1)}
	go func() {
		runtime.LockOSThread() // never unlocked: see runSlot
		err := newRunView(size, under)
		if f, ok := <-s.work; ok {
			f(err)
		}
	}()
	return s
}

// drop ends a slot no run will use (another /tmp size was asked for).
func (s *runSlot) drop() { close(s.work) }

// zygoteMsg is a request as the zygote received it.
type zygoteMsg struct {
	req   zygoteRequest
	files []int
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// zygoteServe runs one command for the zygote, on slot's thread when its
// /tmp has the size asked for, and reports how it ended; msgs brings the
// signals meant for it. It returns the slot of the next run.
func zygoteServe(m zygoteMsg, under []string, say func(string, ...any), msgs <-chan zygoteMsg, slot *runSlot) (next *runSlot) {
	req, files := m.req, m.files
	nb := len(req.Binds)
	if len(files) != 3+nb+2*req.Cgroups {
		closeFDs(files)
		say("setup got %d descriptors, want %d", len(files), 3+nb+2*req.Cgroups)
		return slot
	}
	join, home := files[3+nb:3+nb+req.Cgroups], files[3+nb+req.Cgroups:]
	type started struct {
		pid  int
		kind string // setup | start, when err is set
		err  error
	}
	startc := make(chan started, 1)
	var watch *refusalWatch // set by the run's thread before it reports
	// The thread is set up for this one command and never given back: it
	// ends with the goroutine that runs start.
	start := func(setupErr error) {
		if setupErr != nil {
			startc <- started{0, "setup", setupErr}
			return
		}
		pid, kind, err := zygoteStart(req, files[:3], files[3:3+nb], join, &watch)
		startc <- started{pid, kind, err}
	}
	if slot.size == req.TmpSize {
		slot.work <- start
	} else {
		slot.drop()
		go func() {
			runtime.LockOSThread()
			start(newRunView(req.TmpSize, under))
		}()
	}
	// The next run's slot, made once this run has been reported.
	defer func() { next = newRunSlot(req.TmpSize, under) }()
	st := <-startc
	closeFDs(files[:3+nb+req.Cgroups])
	goHome := func() {
		for _, fd := range home {
			unix.Write(fd, []byte("0"))
		}
		closeFDs(home)
	}
	if st.err != nil {
		goHome()
		say("%s %v", st.kind, st.err)
		return
	}
	say("started")
	var mu sync.Mutex
	gone := false
	exited := make(chan string, 1)
	go func() {
		status := ""
		for {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				break // ECHILD: nothing of the run is left
			}
			if got == st.pid {
				status = fmt.Sprintf("exit %d", ws.ExitStatus())
				if ws.Signaled() {
					status = fmt.Sprintf("signal %d", int(ws.Signal()))
				}
				mu.Lock()
				gone = true
				mu.Unlock()
			}
			if gone {
				// Whatever the command left behind, even outside its
				// group, dies now: this namespace holds only the run.
				unix.Kill(-1, unix.SIGKILL)
			}
		}
		if status == "" {
			status = "setup lost the command"
		}
		exited <- status
	}()
	for {
		select {
		case m := <-msgs:
			closeFDs(m.files)
			if m.req.Op == "signal" {
				mu.Lock()
				if !gone {
					unix.Kill(-st.pid, syscall.Signal(m.req.Signal))
				}
				mu.Unlock()
			}
		case status := <-exited:
			goHome()
			if watch != nil {
				status += refusalLine(watch.result())
			}
			say("%s", status)
			return
		}
	}
}

// newRunView gives the calling thread the part of a run's view that
// depends on no request but /tmp's size: a mount and an IPC namespace of
// its own, a private /tmp (of tmpSize) and /dev/shm. Done ahead of the
// request in a runSlot.
func newRunView(tmpSize int64, under []string) error {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS | unix.CLONE_NEWIPC); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := freshTmp(tmpSize, under); err != nil {
		return err
	}
	if err := unix.Mount("avfs-shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// zygoteStart completes one run's view on the calling thread, which
// newRunView prepared, confines the thread and forks the command from it:
// the writable binds attached from the detached mounts binds, the run's
// cgroups joined.
func zygoteStart(req zygoteRequest, stdio, binds, cgroups []int, watch **refusalWatch) (int, string, error) {
	for i, fd := range binds {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return 0, "setup", fmt.Errorf("bind %s: %w", req.Binds[i], err)
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, req.Binds[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return 0, "setup", fmt.Errorf("bind %s: %w", req.Binds[i], err)
		}
	}
	for _, fd := range cgroups {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return 0, "setup", fmt.Errorf("join cgroup: %w", err)
		}
	}
	listener, err := confine(true)
	if err != nil {
		return 0, "setup", err
	}
	*watch = watchRefusals(listener)
	path, err := lookPath(req.Path, req.Env)
	if err != nil {
		return 0, "start", err
	}
	pid, err := syscall.ForkExec(path, req.Args, &syscall.ProcAttr{
		Dir: req.Dir, Env: req.Env, Files: []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, "start", fmt.Errorf("%s: %w", req.Path, err)
	}
	return pid, "", nil
}

// underTmp lists what the layout put under /tmp (binds, hidden paths,
// mount points), sorted, which each run's fresh /tmp must show again.
func underTmp(cfg initConfig) []string {
	var paths []string
	for _, b := range cfg.Binds {
		paths = append(paths, filepath.Clean(b.Path))
	}
	paths = append(paths, cfg.Hide...)
	for _, p := range cfg.Points {
		paths = append(paths, p.Path)
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		if !strings.HasPrefix(p, "/tmp/") {
			continue
		}
		if len(out) > 0 && p == out[len(out)-1] {
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			continue // skipped when the root was built
		}
		out = append(out, p)
	}
	return out
}

// freshTmp mounts a run's own /tmp over the zygote's, and shows again
// under it what the layout put there (under, from underTmp): mounts are
// cloned and moved back, symlinks and mount points made again.
func freshTmp(size int64, under []string) error {
	type keep struct {
		path, link string
		fd         int // a cloned mount, or -1
		dir        bool
	}
	var kept []keep
	defer func() {
		for _, k := range kept {
			if k.fd >= 0 {
				unix.Close(k.fd)
			}
		}
	}()
	var cloned []string // what is below these comes along
	for _, p := range under {
		if slices.ContainsFunc(cloned, func(c string) bool { return strings.HasPrefix(p, c+"/") }) {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		k := keep{path: p, fd: -1, dir: fi.IsDir()}
		if fi.Mode()&os.ModeSymlink != 0 {
			if k.link, err = os.Readlink(p); err != nil {
				return fmt.Errorf("/tmp: %w", err)
			}
		} else if isMountPoint(p) {
			if k.fd, err = unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE); err != nil {
				return fmt.Errorf("/tmp: keep %s: %w", p, err)
			}
			cloned = append(cloned, p)
		}
		kept = append(kept, k)
	}
	if err := unix.Mount("avfs-tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", size)); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	for _, k := range kept {
		if k.link != "" {
			if err := os.MkdirAll(filepath.Dir(k.path), 0o755); err != nil {
				return fmt.Errorf("/tmp: %w", err)
			}
			if err := os.Symlink(k.link, k.path); err != nil {
				return fmt.Errorf("/tmp: %w", err)
			}
			continue
		}
		if err := makePoint("/", mountPoint{Path: k.path, Dir: k.dir}); err != nil {
			return err
		}
		if k.fd >= 0 {
			if err := unix.MoveMount(k.fd, "", unix.AT_FDCWD, k.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("/tmp: keep %s: %w", k.path, err)
			}
		}
	}
	return nil
}

// isMountPoint reports whether p is the root of a mount.
func isMountPoint(p string) bool {
	var st, parent unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st) != nil ||
		unix.Statx(unix.AT_FDCWD, filepath.Dir(p), 0, unix.STATX_MNT_ID, &parent) != nil {
		return false
	}
	return st.Mnt_id != parent.Mnt_id
}
