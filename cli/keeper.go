package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// The exec keeper (docs/decisions.md §25). Without a server, every `avfs
// exec` used to open the store, mount the vault, start a sandbox init, run
// the command and unmount again: about 50 ms over the CLI's own start-up.
// The first local exec of a home now starts a keeper: this binary again,
// detached (`avfs keeper run`), serving the home's exec requests on a unix
// socket in the home with the mounts and sandbox inits kept warm, exactly
// as `avfs serve` keeps them. Later execs send their request there and get
// the same envelope; the keeper exits by itself after exec.keeper_idle
// without a request.
//
// Files in the home (0700): keeper.sock (0600, and the keeper answers
// only its own user), keeper.lock (held while one CLI starts a keeper, so
// two racing CLIs end with one), keeper.log (the keeper's log).
//
// A keeper serves only CLIs that would behave exactly like it: every
// request carries a fingerprint of the binary, the effective
// configuration (less what a request carries itself: vault, namespace,
// actor, log level) and the environment. A keeper that sees another
// fingerprint answers "stale", stops taking requests and exits once its
// running commands end; the CLI waits for it to go (two processes must
// never serve the same mount point) and starts a new one.

const (
	keeperSock = "keeper.sock"
	keeperLock = "keeper.lock"
	keeperLog  = "keeper.log"
	// keeperAcceptWait bounds the wait for a keeper's first answer: a
	// keeper that accepts a connection but says nothing is wedged, and
	// the CLI runs the command itself instead.
	keeperAcceptWait = 10 * time.Second
	// keeperStartWait bounds the start of a new keeper (opening the
	// store) and the exit of a replaced one.
	keeperStartWait = 15 * time.Second
	// keeperLogMax is the size past which a new keeper starts a new log.
	keeperLogMax = 1 << 20
)

// keeperHello is the first and only line a CLI sends on a connection.
type keeperHello struct {
	Fingerprint string `json:"fingerprint"`
	// Op is "exec" (Request), "status" or "stop".
	Op      string            `json:"op"`
	Request *messages.Request `json:"request,omitempty"`
	// Stream asks for the command's output as it is written.
	Stream bool                `json:"stream,omitempty"`
	Trace  map[string][]string `json:"trace,omitempty"`
}

// keeperFrame is one line the keeper sends back. The first frame is an
// acceptance or a refusal (Stale); then output frames, then one frame
// with the Reply.
type keeperFrame struct {
	Accepted bool            `json:"accepted,omitempty"`
	Stale    string          `json:"stale,omitempty"`
	PID      int             `json:"pid,omitempty"`
	Stream   string          `json:"stream,omitempty"`
	Data     []byte          `json:"data,omitempty"`
	Reply    *messages.Reply `json:"reply,omitempty"`
	Status   *keeperStatus   `json:"status,omitempty"`
}

// keeperStatus is what `avfs keeper status` prints.
type keeperStatus struct {
	Running  bool      `json:"running"`
	PID      int       `json:"pid,omitempty"`
	Socket   string    `json:"socket"`
	Log      string    `json:"log"`
	Started  time.Time `json:"started,omitzero"`
	Requests int64     `json:"requests"`
	Running_ int       `json:"running_commands"`
	Idle     string    `json:"idle_timeout,omitempty"`
	Current  bool      `json:"current"` // serves this CLI's configuration
}

// errKeeperUnavailable means no keeper took the request: the CLI runs the
// command itself.
var errKeeperUnavailable = errors.New("exec keeper unavailable")

// keeperPaths are the keeper's files in home.
func keeperPaths(home string) (sock, lock, log string) {
	return filepath.Join(home, keeperSock), filepath.Join(home, keeperLock), filepath.Join(home, keeperLog)
}

// volatileEnv are variables a shell changes between commands that avfs
// never reads nor passes on; they do not make a keeper stale. AVFS_*
// variables are left out too: they are configuration, and the effective
// configuration is in the fingerprint (AVFS_VAULT and the like travel in
// the request).
var volatileEnv = []string{"PWD", "OLDPWD", "SHLVL", "_"}

// keeperFingerprint identifies what an exec's outcome may depend on
// besides its request: the binary, the configuration and the environment.
func keeperFingerprint(c *config.Config) string {
	h := sha256.New()
	if exe, err := os.Executable(); err == nil {
		fmt.Fprintln(h, exe)
		if st, err := os.Stat(exe); err == nil {
			fmt.Fprintln(h, st.Size(), st.ModTime().UnixNano())
		}
	}
	cc := *c
	cc.Vault, cc.Namespace, cc.Actor, cc.LogLevel = "", "", "", ""
	// Go syntax (%#v: strings quoted, maps sorted; the configuration holds
	// no pointers) rather than JSON: building JSON's encoder for the whole
	// Config on first use cost a quarter of a millisecond per exec, %#v a
	// third of that.
	fmt.Fprintf(h, "%#v\n", cc)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(volatileEnv, k) || strings.HasPrefix(k, "AVFS_")
	})
	slices.Sort(env)
	for _, kv := range env {
		fmt.Fprintln(h, kv)
	}
	fmt.Fprintln(h, os.Getuid(), os.Getgid())
	return hex.EncodeToString(h.Sum(nil))
}

// keeperExec sends an exec request (or an approval grant) to the home's
// keeper, starting one if none runs. errKeeperUnavailable means it was not
// run there.
func (a *app) keeperExec(ctx context.Context, req messages.Request) (messages.Reply, error) {
	home, err := filepath.Abs(a.cfg.Home)
	if err != nil {
		return messages.Reply{}, fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	if sock, _, _ := keeperPaths(home); len(sock) >= len(unix.RawSockaddrUnix{}.Path) {
		// A unix socket's path has a size limit (108 bytes on Linux).
		return messages.Reply{}, fmt.Errorf("%w: %s is too long a path for a unix socket", errKeeperUnavailable, sock)
	}
	fp := keeperFingerprint(a.cfg)
	hello := keeperHello{Fingerprint: fp, Op: "exec", Request: &req, Trace: map[string][]string{}}
	telemetry.Inject(ctx, hello.Trace)
	w, stream := ctx.Value(streamKey{}).(streamTo)
	hello.Stream = stream
	started := false
	for attempt := 0; attempt < 3; attempt++ {
		conn, first, err := keeperDial(home, hello)
		switch {
		case err == nil && first.Accepted:
			return keeperReply(ctx, conn, w, stream)
		case err == nil && first.Stale != "":
			conn.Close()
			a.log.Info("exec keeper serves another configuration: replacing it", "reason", first.Stale, "pid", first.PID)
			if started {
				// One we just started does not match us: something in
				// the start differs. Run in-process rather than loop.
				return messages.Reply{}, fmt.Errorf("%w: a new keeper is stale at once (%s)", errKeeperUnavailable, first.Stale)
			}
			if !waitGone(ctx, first.PID, keeperStartWait) {
				return messages.Reply{}, fmt.Errorf("%w: the stale keeper (pid %d) still runs commands", errKeeperUnavailable, first.PID)
			}
		case err != nil && !errors.Is(err, errNoKeeper):
			return messages.Reply{}, err
		}
		if err := a.startKeeper(ctx, home); err != nil {
			return messages.Reply{}, err
		}
		started = true
	}
	return messages.Reply{}, fmt.Errorf("%w: no keeper after 3 starts", errKeeperUnavailable)
}

// errNoKeeper means nothing listens on the home's socket.
var errNoKeeper = errors.New("no keeper")

// keeperDial connects to the keeper of home, sends hello and reads the
// first frame. errNoKeeper: nothing listens; errKeeperUnavailable: a
// keeper listens but does not answer.
func keeperDial(home string, hello keeperHello) (*keeperConn, keeperFrame, error) {
	sock, _, _ := keeperPaths(home)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, keeperFrame{}, fmt.Errorf("%w: %v", errNoKeeper, err)
	}
	kc := &keeperConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	b, _ := json.Marshal(hello)
	c.SetDeadline(time.Now().Add(keeperAcceptWait))
	var first keeperFrame
	if _, err = c.Write(append(b, '\n')); err == nil {
		first, err = kc.next()
	}
	if err != nil {
		c.Close()
		return nil, first, fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	c.SetDeadline(time.Time{})
	return kc, first, nil
}

type keeperConn struct {
	c *net.UnixConn
	r *bufio.Reader
}

func (k *keeperConn) next() (keeperFrame, error) {
	var f keeperFrame
	line, err := k.r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return f, io.ErrUnexpectedEOF
		}
		if len(line) == 0 {
			return f, err
		}
	}
	return f, json.Unmarshal(line, &f)
}

func (k *keeperConn) Close() error { return k.c.Close() }

// keeperReply reads output frames until the reply. When ctx ends (the
// CLI was interrupted), it closes its side for writing: the keeper
// cancels the command and still sends the envelope, as an in-process
// run would return it.
func keeperReply(ctx context.Context, kc *keeperConn, w streamTo, stream bool) (messages.Reply, error) {
	defer kc.Close()
	stop := context.AfterFunc(ctx, func() { kc.c.CloseWrite() })
	defer stop()
	for {
		f, err := kc.next()
		if err != nil {
			// Accepted, then gone: the command may have run. Running it
			// again could run it twice, so this is an error.
			return messages.Reply{}, messages.Errorf(messages.CodeUnavailable, "the exec keeper ended during the command: %v (see %s)", err, keeperLog)
		}
		switch {
		case f.Reply != nil:
			return *f.Reply, nil
		case stream && f.Stream == messages.StreamStderr:
			w.stderr.Write(f.Data)
		case stream && f.Stream != "":
			w.stdout.Write(f.Data)
		}
	}
}

// startKeeper starts a keeper for home unless another CLI did meanwhile:
// the lock file serialises starters, and a starter that finds a keeper
// answering once it holds the lock starts nothing.
func (a *app) startKeeper(ctx context.Context, home string) error {
	sock, lockPath, logPath := keeperPaths(home)
	if err := config.EnsureDir(home); err != nil {
		return fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	lf, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, config.FileMode)
	if err != nil {
		return fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	defer lf.Close()
	if err := flockCtx(ctx, lf, keeperStartWait); err != nil {
		return fmt.Errorf("%w: lock %s: %v", errKeeperUnavailable, lockPath, err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	// Someone may have started one while we waited for the lock.
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		return nil
	}
	// Nothing listens: a socket file left is a dead keeper's.
	os.Remove(sock)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	if st, err := os.Stat(logPath); err == nil && st.Size() > keeperLogMax {
		os.Rename(logPath, logPath+".1") // one old log kept
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, config.FileMode)
	if err != nil {
		return fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: %v", errKeeperUnavailable, err)
	}
	defer pr.Close()
	args := []string{"keeper", "run", "--home", home, "--ready-fd", "3"}
	if cf := a.viper.ConfigFileUsed(); cf != "" && os.Getenv("AVFS_CONFIG") == "" {
		if abs, err := filepath.Abs(cf); err == nil {
			if _, err := os.Stat(abs); err == nil {
				args = append(args, "--config", abs)
			}
		}
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = home
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw}
	// Its own session: no terminal's signals reach it, and it outlives
	// this CLI.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return fmt.Errorf("%w: start: %v", errKeeperUnavailable, err)
	}
	pid := cmd.Process.Pid
	// Reaped here if it exits while this process lives (a long-lived
	// caller of Main, tests); a CLI that exits first leaves it to init.
	go cmd.Wait()
	pr.SetReadDeadline(time.Now().Add(keeperStartWait))
	line, _ := bufio.NewReader(pr).ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		msg := strings.TrimSpace(line)
		if msg == "" {
			msg = "it exited or did not answer"
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return fmt.Errorf("%w: keeper (pid %d): %s (see %s)", errKeeperUnavailable, pid, msg, logPath)
	}
	a.log.Info("exec keeper started", "pid", pid, "socket", sock)
	return nil
}

// flockCtx takes an exclusive lock on f, giving up after wait.
func flockCtx(ctx context.Context, f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitGone waits until process pid has exited. An exited process its
// parent has not reaped yet (a zombie: a keeper outlives the CLI that
// started it, and whoever inherits it may reap late) has gone: its mounts
// and descriptors are closed.
func waitGone(ctx context.Context, pid int, wait time.Duration) bool {
	if pid <= 0 {
		return true
	}
	deadline := time.Now().Add(wait)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// stopKeeper asks the keeper of home, if any, to stop and waits until it
// has gone (its running commands end first). `avfs serve` calls it: the
// keeper's mounts sit where the server mounts the same vaults.
func stopKeeper(ctx context.Context, home string) error {
	kc, first, err := keeperDial(home, keeperHello{Op: "stop"})
	if errors.Is(err, errNoKeeper) {
		return nil
	}
	if err != nil {
		return err
	}
	kc.Close()
	if !waitGone(ctx, first.PID, keeperStartWait) {
		return fmt.Errorf("exec keeper (pid %d) did not stop within %s", first.PID, keeperStartWait)
	}
	return nil
}

// keeperForget tells the home's keeper, if one runs, that vault ns/name
// was deleted, so that it unmounts it now rather than at its idle exit.
// Best effort: a keeper that misses it finds out at the vault's next exec.
func keeperForget(home, ns, name string) {
	home, err := filepath.Abs(home)
	if err != nil {
		return
	}
	sock, _, _ := keeperPaths(home)
	if _, err := os.Stat(sock); err != nil {
		return
	}
	req := messages.Request{Op: messages.OpVaultDelete, Namespace: ns, Vault: name}
	if kc, _, err := keeperDial(home, keeperHello{Op: "forget", Request: &req}); err == nil {
		kc.Close()
	}
}

// zombie reports whether process pid has exited and awaits its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}
