package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults applied to the zero values of Spec.
const (
	DefaultTimeout   = 300 * time.Second
	DefaultGrace     = 5 * time.Second
	DefaultMaxOutput = 1 << 20
)

// DefaultPath is searched for a program when Spec.Env has no PATH, so that
// lookup never depends on the worker's own environment.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// drainDelay bounds how long Run keeps reading output once the leader has
// exited and its group has been killed. Only a process that escaped the
// group can hold the pipes open that long, and it must not hold the run
// hostage.
const drainDelay = 2 * time.Second

// Errors returned by Run. Everything else that can happen to a command (a
// non-zero exit, a signal, a timeout) is reported in Result, not as an error.
var (
	// ErrInvalidSpec: the Spec is unusable (no command, both Argv and
	// Shell, a relative Dir, a negative limit). Nothing was started.
	ErrInvalidSpec = errors.New("invalid command spec")
	// ErrStart: the program could not be started (not found, not
	// executable, bad working directory). The os error is wrapped too.
	ErrStart = errors.New("command failed to start")
)

// Spec describes one command to run.
type Spec struct {
	Argv      []string      // program and arguments; exactly one of Argv or Shell
	Shell     string        // run as /bin/sh -c Shell
	Dir       string        // working directory, an absolute host path; "" = the worker's own
	Env       []string      // complete environment, "K=V" (build it with BuildEnv); nil = empty
	Stdin     io.Reader     // nil = closed: reads get EOF at once; see Run
	Timeout   time.Duration // 0 = DefaultTimeout; on expiry the group gets SIGTERM
	Grace     time.Duration // 0 = DefaultGrace; time between SIGTERM and SIGKILL
	MaxOutput int           // bytes kept per stream, head and tail; 0 = DefaultMaxOutput
	// EnterDir changes into Dir after the program starts (through
	// /usr/bin/env -C) instead of before. Set it when Dir is on a FUSE
	// mount that this process serves: os/exec's vfork suspends the
	// parent thread until the child execs, and a child that chdirs into
	// the mount first waits on a server that may be waiting, in a
	// stop-the-world GC, on that suspended thread.
	EnterDir bool
	// Sandbox, if set, confines the command to namespaces of its own (see
	// Sandbox); Dir must then be a path the sandbox binds.
	Sandbox *Sandbox
	// Stdout and Stderr, when set, also receive each stream as it is
	// read, uncapped, for callers that show output live. A write error
	// is ignored; a slow writer slows the command, whose pipe fills.
	Stdout, Stderr io.Writer
}

// Result is what happened to a command. Stdout and Stderr keep the first
// and last MaxOutput/2 bytes of each stream, separated by a marker line
// such as "\n[... 12345 bytes omitted ...]\n" when the middle was dropped.
type Result struct {
	ExitCode *int   // 0..255 for a normal exit; nil when ended by a signal or not started
	Signal   string // "SIGKILL", "SIGTERM", ... when the leader ended by a signal, else ""
	TimedOut bool   // the timeout expired before the leader exited
	Limit    string // LimitMemory, LimitPids: a sandbox limit the command hit, else ""
	Canceled bool   // ctx was done before the leader exited (or before it could start)
	// Refused lists what a sandbox refused the command (Refusal), in the
	// order first seen; nil without a sandbox or when nothing was.
	Refused []Refusal

	Stdout, Stderr                   []byte
	StdoutBytes, StderrBytes         int64 // total bytes produced, before capping
	StdoutTruncated, StderrTruncated bool

	StartedAt time.Time
	Duration  time.Duration // wall time until Run returned
}

// Run runs the command described by s and waits for it, its process group
// and its output. It returns an error only when s is invalid
// (ErrInvalidSpec) or the program could not be started (ErrStart); then
// Result still carries StartedAt and Duration. A command that times out or
// whose ctx is canceled gets the same treatment: SIGTERM to its group, then
// SIGKILL after s.Grace; its Result holds the output captured until then.
// If ctx is already done, nothing is started and Result.Canceled is set.
//
// Run does not wait for a Stdin that is not an *os.File to reach EOF: once
// the leader has exited, the pipe to the command is closed, but a Read
// already blocked in Stdin cannot be interrupted; the goroutine copying it
// ends when that Read returns.
func Run(ctx context.Context, s Spec) (Result, error) {
	if err := s.validate(); err != nil {
		return Result{}, err
	}
	s = s.withDefaults()
	res := Result{StartedAt: time.Now()}
	startErr := func(err error) (Result, error) {
		res.Duration = time.Since(res.StartedAt)
		return res, fmt.Errorf("%w: %w", ErrStart, err)
	}
	if ctx.Err() != nil {
		res.Canceled = true
		return res, nil
	}

	if s.Sandbox != nil && s.Sandbox.Pool != nil && !s.Sandbox.Network && s.Sandbox.Pool.open() {
		return s.Sandbox.Pool.run(ctx, s, res)
	}
	cmd, err := s.command()
	if err != nil {
		return startErr(err)
	}
	var sb *sandboxRun
	if s.Sandbox != nil {
		if sb, err = s.Sandbox.prepare(cmd, s.Dir); err != nil {
			return startErr(err)
		}
		defer sb.close()
	}
	cp, err := newCapture()
	if err != nil {
		return startErr(err)
	}
	cmd.Stdout, cmd.Stderr = cp.outW, cp.errW
	feedStdin, err := wireStdin(cmd, s.Stdin)
	if err != nil {
		cp.abort()
		return startErr(err)
	}
	err = cmd.Start()
	// The child holds its own copies of the pipe ends it uses; ours would
	// keep the pipes open and the drains waiting for an EOF that never comes.
	cp.started()
	if sb != nil {
		sb.started(cmd)
		if err != nil {
			err = fmt.Errorf("%w: new namespaces: %w", ErrSandbox, err)
		}
	}
	if err != nil {
		cp.abort()
		feedStdin.Close()
		return startErr(err)
	}
	feedStdin.start()
	cp.drain(s)

	// The leader's pid is also its group id (Setpgid with Pgid 0).
	pgid := cmd.Process.Pid
	var exitErr error
	exited := make(chan struct{})
	go func() { exitErr = waitExited(pgid); close(exited) }()

	timer := time.NewTimer(s.Timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		select {
		case <-exited: // exited right at the deadline: not a timeout
		default:
			res.TimedOut = true
			stopGroup(pgid, s.Grace, exited)
		}
	case <-ctx.Done():
		res.Canceled = true
		stopGroup(pgid, s.Grace, exited)
	}
	if exitErr == nil {
		// The leader is a zombie, not yet reaped, so the group id still
		// belongs to this command and cannot hit a stranger. Whatever it
		// left running in the background dies with it.
		signalGroup(pgid, syscall.SIGKILL)
	}
	waitErr := cmd.Wait()
	feedStdin.Close()
	cp.finish(&res)
	res.Duration = time.Since(res.StartedAt)
	if cmd.ProcessState == nil {
		// Only if the process could not be waited for at all, which means
		// something else in this process reaped it.
		return res, fmt.Errorf("wait %s: %w", cmd.Path, errors.Join(exitErr, waitErr))
	}
	// waitErr is an *ExitError, reported below, not the caller's error.
	res.ExitCode, res.Signal = exitStatus(cmd.ProcessState)
	if sb != nil {
		if err := sb.finish(&res); err != nil {
			return startErr(err)
		}
	}
	return res, nil
}

// capture owns the pipes of a command's stdout and stderr and the
// goroutines that drain them.
type capture struct {
	outR, outW, errR, errW *os.File
	stdout, stderr         *capBuffer
	drained                chan struct{}
}

func newCapture() (*capture, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	return &capture{outR: outR, outW: outW, errR: errR, errW: errW}, nil
}

// started lets go of the write ends, which the command now holds.
func (c *capture) started() {
	c.outW.Close()
	c.errW.Close()
}

// abort closes everything when the command did not start.
func (c *capture) abort() {
	c.started()
	c.outR.Close()
	c.errR.Close()
}

// drain starts copying both streams.
func (c *capture) drain(s Spec) {
	c.stdout, c.stderr = newCapBuffer(s.MaxOutput), newCapBuffer(s.MaxOutput)
	var drains sync.WaitGroup
	drains.Go(func() { drain(c.outR, c.stdout, s.Stdout) })
	drains.Go(func() { drain(c.errR, c.stderr, s.Stderr) })
	c.drained = make(chan struct{})
	go func() { drains.Wait(); close(c.drained) }()
}

// finish waits, at most drainDelay, for the streams' EOF and puts what
// was captured into res.
func (c *capture) finish(res *Result) {
	bound := time.NewTimer(drainDelay)
	select {
	case <-c.drained:
	case <-bound.C:
		// Someone outside the group still holds a write end. Cut it off;
		// it gets EPIPE on its next write.
		now := time.Now()
		c.outR.SetReadDeadline(now)
		c.errR.SetReadDeadline(now)
		<-c.drained
	}
	bound.Stop()
	c.outR.Close()
	c.errR.Close()
	res.Stdout, res.StdoutBytes, res.StdoutTruncated = c.stdout.Bytes(), c.stdout.Total(), c.stdout.Truncated()
	res.Stderr, res.StderrBytes, res.StderrTruncated = c.stderr.Bytes(), c.stderr.Total(), c.stderr.Truncated()
}

// stopGroup asks the group to stop, then forces it: SIGTERM, up to grace
// for the leader to exit, then SIGKILL. It returns once the leader has
// exited; the caller kills whatever else is left of the group.
func stopGroup(pgid int, grace time.Duration, exited <-chan struct{}) {
	signalGroup(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		signalGroup(pgid, syscall.SIGKILL)
		<-exited
	}
}

// stdinFeeder copies a caller's reader into the command's stdin pipe. Run
// owns it instead of os/exec because os/exec's Wait waits for that copy to
// finish, and a reader that blocks forever would hang the run.
type stdinFeeder struct {
	src  io.Reader
	r, w *os.File // nil when no pipe is needed
}

// wireStdin sets cmd.Stdin: /dev/null for nil (os/exec's default), the
// file itself for an *os.File, else the read end of a pipe that the
// returned feeder fills once started.
func wireStdin(cmd *osexec.Cmd, src io.Reader) (*stdinFeeder, error) {
	if f, ok := src.(*os.File); ok {
		cmd.Stdin = f
		return &stdinFeeder{}, nil
	}
	if src == nil {
		return &stdinFeeder{}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	cmd.Stdin = r
	return &stdinFeeder{src: src, r: r, w: w}, nil
}

// start begins copying once the command has started, and lets go of the
// read end, which the child now holds: ours would keep the pipe readable
// and the copy blocked once the child is gone.
func (f *stdinFeeder) start() {
	if f.w == nil {
		return
	}
	f.r.Close()
	go func() {
		// EPIPE when the command exits without reading everything is
		// normal; there is nobody to report any other error to.
		_, _ = io.Copy(f.w, f.src)
		f.w.Close()
	}()
}

// Close stops feeding: a later write by the copying goroutine fails. It may
// race with the goroutine's own Close, which os.File tolerates.
func (f *stdinFeeder) Close() {
	if f.w != nil {
		f.r.Close()
		f.w.Close()
	}
}

// drain copies r into b, and into tee if set, until EOF or a read error
// (including the deadline set when draining is cut short). b never fails
// a write, so the writer is never stalled by capping.
func drain(r *os.File, b *capBuffer, tee io.Writer) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if tee != nil && n > 0 {
			_, _ = tee.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (s Spec) validate() error {
	switch {
	case len(s.Argv) == 0 && s.Shell == "":
		return fmt.Errorf("%w: neither argv nor shell given", ErrInvalidSpec)
	case len(s.Argv) > 0 && s.Shell != "":
		return fmt.Errorf("%w: both argv and shell given", ErrInvalidSpec)
	case len(s.Argv) > 0 && s.Argv[0] == "":
		return fmt.Errorf("%w: empty program name", ErrInvalidSpec)
	case s.Dir != "" && !filepath.IsAbs(s.Dir):
		return fmt.Errorf("%w: dir %q is not absolute", ErrInvalidSpec, s.Dir)
	case s.Timeout < 0 || s.Grace < 0 || s.MaxOutput < 0:
		return fmt.Errorf("%w: negative timeout, grace or max output", ErrInvalidSpec)
	}
	return nil
}

func (s Spec) withDefaults() Spec {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.MaxOutput == 0 {
		s.MaxOutput = DefaultMaxOutput
	}
	return s
}

// command builds the os/exec command without Stdout and Stderr, which Run
// wires to its own pipes.
func (s Spec) command() (*osexec.Cmd, error) {
	path, args := "/bin/sh", []string{"sh", "-c", s.Shell}
	if s.Shell == "" {
		path, args = s.Argv[0], s.Argv
		// A sandbox's init looks the program up in the sandbox's tree.
		if s.Sandbox == nil {
			var err error
			if path, err = lookPath(s.Argv[0], s.Env); err != nil {
				return nil, err
			}
		}
	}
	env := s.Env
	if env == nil {
		// os/exec reads a nil Env as "inherit the worker's environment".
		env = []string{}
	}
	dir := s.Dir
	if s.EnterDir && dir != "" && s.Sandbox == nil {
		args = append([]string{"env", "-C", dir, "--", path}, args[1:]...)
		path, dir = "/usr/bin/env", "/"
	}
	return &osexec.Cmd{
		Path:        path,
		Args:        args,
		Dir:         dir,
		Env:         env,
		SysProcAttr: sysProcAttr(),
	}, nil
}

// lookPath finds name along the PATH of the command's own environment
// (DefaultPath if it has none), not the worker's: the command must run the
// program its environment names. A name with a slash is used as is; a
// relative one is resolved by the kernel against Spec.Dir. Relative PATH
// entries are skipped, as os/exec does, since they depend on the cwd and
// let a vault's files shadow system programs.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathList, ok := lookupEnv(env, "PATH")
	if !ok {
		pathList = DefaultPath
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &osexec.Error{Name: name, Err: osexec.ErrNotFound}
}
