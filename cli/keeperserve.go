package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

func (a *app) keeperCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "keeper",
		Short: "The exec keeper: what keeps vaults mounted between local `avfs exec` calls",
		Long: `Without a server (avfs serve, or --nats), the first avfs exec of a home
starts a keeper: avfs again, in the background, holding the vault's mount and
a sandbox init between commands, so that later execs skip both. It serves
only its own user, on $AVFS_HOME/keeper.sock, logs to $AVFS_HOME/keeper.log,
and exits by itself after exec.keeper_idle (default 5m) without a request.
A keeper started with another binary, configuration or environment is
replaced. exec.keeper: false (env AVFS_EXEC_KEEPER=false) runs every exec in
the CLI's own process, as before.`,
		Args: cobra.NoArgs,
	}
	var readyFD int
	run := &cobra.Command{
		Use:    "run",
		Short:  "Serve the home's local execs (started by avfs exec)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runKeeper(cmd.Context(), readyFD)
		},
	}
	run.Flags().IntVar(&readyFD, "ready-fd", 0, "descriptor to write \"ok\" to once serving")
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the home's exec keeper, if one runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, _ := filepath.Abs(a.cfg.Home)
			sock, _, logPath := keeperPaths(home)
			st := keeperStatus{Socket: sock, Log: logPath}
			kc, first, err := keeperDial(home, keeperHello{Op: "status", Fingerprint: keeperFingerprint(a.cfg)})
			switch {
			case errors.Is(err, errNoKeeper):
			case err != nil:
				return messages.Errorf(messages.CodeUnavailable, "%v", err)
			default:
				kc.Close()
				if first.Status != nil {
					st = *first.Status
				}
			}
			return a.emit(st)
		},
	}
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Stop the home's exec keeper once its running commands end (it unmounts what it kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, _ := filepath.Abs(a.cfg.Home)
			if err := stopKeeper(cmd.Context(), home); err != nil {
				return messages.Errorf(messages.CodeUnavailable, "%v", err)
			}
			return a.emit(map[string]any{"stopped": true})
		},
	}
	c.AddCommand(run, status, stop)
	return c
}

// keeper is a running exec keeper's state.
type keeper struct {
	a      *app
	log    *slog.Logger
	local  *localClient
	fp     string
	ln     *net.UnixListener
	sock   string
	sockID uint64 // inode of the socket file it made: it removes only that one
	idle   time.Duration
	start  time.Time

	mu       sync.Mutex
	running  int
	last     time.Time
	requests int64
	closing  bool
	wg       sync.WaitGroup
	stopping chan struct{}
	stopOnce sync.Once
}

// runKeeper serves the home's local exec requests until it is idle for
// exec.keeper_idle, asked to stop, replaced, or signalled.
func (a *app) runKeeper(ctx context.Context, readyFD int) error {
	var ready *os.File
	if readyFD > 0 {
		ready = os.NewFile(uintptr(readyFD), "ready")
		defer ready.Close()
	}
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "%v\n", err)
		}
		return err
	}
	if a.level != nil && a.level.Level() > slog.LevelInfo {
		a.level.Set(slog.LevelInfo) // its log is a file: say what it does
	}
	home, err := filepath.Abs(a.cfg.Home)
	if err != nil {
		return fail(err)
	}
	if url := runningServe(home); url != "" {
		return fail(fmt.Errorf("avfs serve runs on %s (%s): it serves exec there", home, url))
	}
	log := a.log.With("component", "keeper", "pid", os.Getpid())
	sock, _, _ := keeperPaths(home)
	// The home is 0700 and the socket 0600 from the start (umask), so no
	// other user can connect even in the moment before a chmod.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", sock, err))
	}
	ln.SetUnlinkOnClose(false) // removed below, only if still ours
	var st unix.Stat_t
	unix.Stat(sock, &st)
	k := &keeper{a: a, log: log, fp: keeperFingerprint(a.cfg), ln: ln, sock: sock, sockID: st.Ino,
		idle: a.cfg.Exec.KeeperIdle, start: time.Now(), last: time.Now(), stopping: make(chan struct{})}
	if k.idle <= 0 {
		k.idle = 5 * time.Minute
	}
	k.local, err = openLocal(ctx, a.cfg, log, a.tracer, "local", true)
	if err != nil {
		k.removeSock()
		ln.Close()
		return fail(err)
	}
	if ready != nil {
		fmt.Fprintln(ready, "ok")
		ready.Close()
		ready = nil
	}
	log.Info("exec keeper serving", "socket", sock, "idle_timeout", k.idle.String())
	go k.watch(ctx)
	k.serve()
	k.wg.Wait()
	err = k.local.Close()
	log.Info("exec keeper stopped", "requests", k.requests, telemetry.LogKeyErr, err)
	return nil
}

// watch stops the keeper when ctx ends or it has been idle long enough.
func (k *keeper) watch(ctx context.Context) {
	tick := time.NewTicker(min(k.idle/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			k.stop("signal")
			return
		case <-k.stopping:
			return
		case <-tick.C:
			k.mu.Lock()
			idle := k.running == 0 && time.Since(k.last) >= k.idle
			k.mu.Unlock()
			if idle {
				k.stop("idle")
				return
			}
			// Its socket removed or replaced: it can no longer be found.
			var st unix.Stat_t
			if unix.Stat(k.sock, &st) != nil || st.Ino != k.sockID {
				k.stop("socket gone")
				return
			}
		}
	}
}

// stop closes the listener and removes the socket: no new request
// reaches this keeper; running ones finish.
func (k *keeper) stop(why string) {
	k.stopOnce.Do(func() {
		k.log.Info("exec keeper stopping", "reason", why)
		k.mu.Lock()
		k.closing = true
		k.mu.Unlock()
		k.removeSock()
		k.ln.Close()
		close(k.stopping)
	})
}

func (k *keeper) removeSock() {
	var st unix.Stat_t
	if unix.Stat(k.sock, &st) == nil && st.Ino == k.sockID {
		os.Remove(k.sock)
	}
}

func (k *keeper) serve() {
	for {
		c, err := k.ln.AcceptUnix()
		if err != nil {
			return
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer c.Close()
			k.handle(c)
		}()
	}
}

// handle serves one connection: one hello, then frames.
func (k *keeper) handle(c *net.UnixConn) {
	if !k.sameUser(c) {
		return
	}
	send := func(f keeperFrame) error {
		b, _ := json.Marshal(f)
		_, err := c.Write(append(b, '\n'))
		return err
	}
	c.SetReadDeadline(time.Now().Add(keeperAcceptWait))
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	var h keeperHello
	if err := json.Unmarshal(line, &h); err != nil {
		k.log.Warn("bad request", telemetry.LogKeyErr, err)
		return
	}
	pid := os.Getpid()
	switch h.Op {
	case "stop":
		send(keeperFrame{Accepted: true, PID: pid})
		k.stop("asked")
		return
	case "status":
		k.mu.Lock()
		st := keeperStatus{Running: true, PID: pid, Socket: k.sock, Log: filepath.Join(filepath.Dir(k.sock), keeperLog),
			Started: k.start.UTC(), Requests: k.requests, Running_: k.running, Idle: k.idle.String(), Current: h.Fingerprint == k.fp}
		k.mu.Unlock()
		send(keeperFrame{Accepted: true, PID: pid, Status: &st})
		return
	case "forget":
		send(keeperFrame{Accepted: true, PID: pid})
		if r := h.Request; r != nil {
			// Only a vault that is really gone: the mount may be in use.
			if _, err := k.local.store.Vault(r.Namespace, r.Vault).Incarnation(context.Background()); errors.Is(err, vault.ErrVaultNotFound) {
				k.log.Info("vault deleted elsewhere: unmounting it", "namespace", r.Namespace, "vault", r.Vault)
				k.local.h.Changed(messages.OpVaultDelete, r.Namespace, r.Vault)
			}
		}
		return
	case "exec":
	default:
		return
	}
	if h.Request == nil || h.Request.Op != messages.OpExec && h.Request.Op != messages.OpApprovalGrant {
		send(keeperFrame{Stale: "not an exec request", PID: pid})
		return
	}
	if h.Fingerprint != k.fp {
		// Another binary, configuration or environment: the CLI starts
		// a keeper of its own once this one has gone.
		send(keeperFrame{Stale: "another binary, configuration or environment", PID: pid})
		k.stop("stale")
		return
	}
	k.mu.Lock()
	if k.closing {
		k.mu.Unlock()
		send(keeperFrame{Stale: "stopping", PID: pid})
		return
	}
	k.running++
	k.requests++
	k.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			k.mu.Lock()
			k.running--
			k.last = time.Now()
			k.mu.Unlock()
		})
	}
	defer done()
	if send(keeperFrame{Accepted: true, PID: pid}) != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = telemetry.Extract(ctx, h.Trace)
	// The CLI closes its side when it is interrupted: cancel the run,
	// which still answers with its envelope.
	go func() {
		r.ReadByte()
		cancel()
	}()
	var wmu sync.Mutex
	if h.Stream {
		ctx = runner.WithOutput(ctx, func(stream string, p []byte) {
			wmu.Lock()
			defer wmu.Unlock()
			send(keeperFrame{Stream: stream, Data: p})
		})
	}
	rep, _ := k.local.Do(ctx, *h.Request)
	done() // before the reply: whoever reads it may ask for the status next
	wmu.Lock()
	defer wmu.Unlock()
	send(keeperFrame{Reply: &rep})
}

// sameUser admits only the keeper's own user (and root).
func (k *keeper) sameUser(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return false
	}
	if int(cred.Uid) != os.Getuid() && cred.Uid != 0 {
		k.log.Warn("refused a connection from another user", "uid", cred.Uid)
		return false
	}
	return true
}
