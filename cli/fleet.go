package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/worker"
)

// serveInfo is written to $AVFS_HOME/serve.json while `avfs serve` runs,
// so CLIs on the same home talk to it instead of opening the store
// themselves: two processes never own one vault.
type serveInfo struct {
	URL    string `json:"url"`
	PID    int    `json:"pid"`
	Worker string `json:"worker"`
}

func servePath(home string) string { return filepath.Join(home, "serve.json") }

// runningServe returns the URL of a live `avfs serve` on home, or "".
func runningServe(home string) string {
	b, err := os.ReadFile(servePath(home))
	if err != nil {
		return ""
	}
	var si serveInfo
	if json.Unmarshal(b, &si) != nil || si.PID <= 0 {
		return ""
	}
	if err := syscall.Kill(si.PID, 0); err != nil {
		return "" // left behind by a serve that was killed
	}
	return si.URL
}

// connectNATS dials a fleet with the configured credentials.
func connectNATS(c *config.Config, url, name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	n := c.NATS
	switch {
	case n.Creds != "":
		opts = append(opts, nats.UserCredentials(n.Creds))
	case n.NKey != "":
		o, err := nats.NkeyOptionFromSeed(n.NKey)
		if err != nil {
			return nil, messages.Errorf(messages.CodeInvalidArgument, "nats nkey: %v", err)
		}
		opts = append(opts, o)
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	}
	if n.InboxPrefix != "" {
		if err := client.ValidInboxPrefix(n.InboxPrefix); err != nil {
			return nil, messages.Errorf(messages.CodeInvalidArgument, "nats.inbox_prefix: %v", err)
		}
		opts = append(opts, nats.CustomInboxPrefix(n.InboxPrefix))
	}
	if n.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(n.TLS.CA))
	}
	if n.TLS.Cert != "" {
		opts = append(opts, nats.ClientCert(n.TLS.Cert, n.TLS.Key))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "connect to %s: %v", url, err)
	}
	return nc, nil
}

func newWorkerID() string {
	var b [3]byte
	rand.Read(b[:])
	h, _ := os.Hostname()
	if len(h) > 20 {
		h = h[:20]
	}
	if h == "" {
		h = "w"
	}
	return sanitizeToken(h) + "-" + hex.EncodeToString(b[:])
}

// homeWorkerID is the worker id kept in $AVFS_HOME/worker-id, made on
// first use: a `serve` or `worker` restarted on the same home without
// --id is the same worker, which still owns its vaults and its consumer,
// so it serves them at once instead of waiting for a stranger's
// heartbeat to expire.
func homeWorkerID(home string) (string, error) {
	path := filepath.Join(home, "worker-id")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || sanitizeToken(id) != id {
			return "", messages.Errorf(messages.CodeInvalidArgument, "%s holds %q, not a worker id: fix or remove it", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := newWorkerID()
	if err := config.WriteFile(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("keep worker id: %w", err)
	}
	return id, nil
}

// sanitizeToken keeps a string usable as one NATS subject token.
func sanitizeToken(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			out[i] = '-'
		}
	}
	return string(out)
}

// runWorker serves the store under the config's home as worker id until
// ctx ends.
func (a *app) runWorker(ctx context.Context, nc *nats.Conn, id string) error {
	o := worker.ServeOptions{ID: id, Logger: a.log, Tracer: a.tracer, Heartbeat: a.cfg.Fleet.Heartbeat, GCInterval: a.cfg.Fleet.GCInterval}
	if op := os.Getenv(faultExitAfterKeep); op != "" {
		// A test fault (e2e): the process dies as a SIGKILL would, once
		// the fleet holds a change of op and before its reply.
		o.Wrap = worker.ExitAfterKeep(messages.Op(op))
	}
	if os.Getenv(faultNoCatchUp) != "" {
		// A test fault (e2e): writes through the worker's mounts are
		// held only by fsync, mount.stop and the next logged request.
		o.CatchUpEvery = -1
	}
	m, err := worker.Open(ctx, nc, worker.Options{
		Node:  node.Options{Config: a.cfg, Worker: id, Logger: a.log, Tracer: a.tracer, Meter: a.meter},
		Serve: o,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Run(ctx)
}

func (a *app) serveCmd() *cobra.Command {
	var listen, httpAddr, id string
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the embedded fleet: NATS with JetStream, a dispatcher and a worker, in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.tuneRuntime(); err != nil {
				return err
			}
			if url := runningServe(a.cfg.Home); url != "" {
				return messages.Errorf(messages.CodeAlreadyExists, "avfs serve is already running on %s (%s)", a.cfg.Home, url)
			}
			// The exec keeper's mounts sit where the server mounts the
			// same vaults: one process serves a home's execs.
			if home, err := filepath.Abs(a.cfg.Home); err == nil {
				if err := stopKeeper(ctx, home); err != nil {
					return messages.Errorf(messages.CodeUnavailable, "%v", err)
				}
			}
			if id == "" {
				var err error
				if id, err = homeWorkerID(a.cfg.Home); err != nil {
					return err
				}
			}
			hs, stopMetrics, err := a.startMetrics(httpAddr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			f, err := a.startFleet(ctx, listen, id)
			if err != nil {
				return err
			}
			defer f.stop()
			info := serveInfo{URL: f.ns.ClientURL(), PID: os.Getpid(), Worker: id}
			b, _ := json.Marshal(info)
			if err := config.WriteFile(servePath(a.cfg.Home), b); err != nil {
				return err
			}
			defer os.Remove(servePath(a.cfg.Home))
			out := map[string]any{"url": info.URL, "worker": id, "home": a.cfg.Home}
			if hs != nil {
				out["http"] = hs.Addr
			}
			if err := a.emit(out); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case err := <-f.errc:
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "", "host:port for NATS clients (default: a random loopback port)")
	c.Flags().StringVar(&httpAddr, "http", "", "host:port serving /metrics (Prometheus) and /healthz (port 0: any; printed as \"http\")")
	c.Flags().StringVar(&id, "id", "", "worker id (default: the one kept in $AVFS_HOME/worker-id, made from the hostname and a random suffix on first start)")
	return c
}

// fleet is an embedded fleet running in this process.
type fleet struct {
	ns   *server.Server
	nc   *nats.Conn
	errc chan error
	stop func()
}

// startFleet runs the embedded fleet of `avfs serve`: NATS with JetStream
// under the home, a dispatcher and a worker serving the home's store.
func (a *app) startFleet(ctx context.Context, listen, id string) (*fleet, error) {
	storeDir := filepath.Join(a.cfg.Home, "nats")
	if err := config.EnsureDir(storeDir); err != nil {
		return nil, err
	}
	ns, err := embedded.Start(embedded.Options{Listen: listen, StoreDir: storeDir})
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns), nats.Name("avfs-serve"))
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	fail := func(err error) (*fleet, error) {
		nc.Close()
		ns.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	// One embedded server: a replica each, whatever nats.replicas says.
	t := a.topology()
	t.Replicas = 1
	if err := embedded.Setup(ctx, js, t); err != nil {
		return fail(err)
	}
	d, err := dispatcher.New(ctx, nc, dispatcher.Options{ID: id, Logger: a.log, Tracer: a.tracer, Heartbeat: a.cfg.Fleet.Heartbeat})
	if err != nil {
		return fail(err)
	}
	f := &fleet{ns: ns, nc: nc, errc: make(chan error, 2)}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.errc <- d.Run(runCtx) }()
	go func() { defer wg.Done(); f.errc <- a.runWorker(runCtx, nc, id) }()
	// Stop in order: the worker finishes its requests and unmounts
	// before the NATS server goes away.
	f.stop = func() {
		cancel()
		wg.Wait()
		nc.Close()
		ns.Shutdown()
	}
	return f, nil
}

// tuneRuntime checks the fleet's timings (fleet.*) and applies
// runtime.gc_percent and runtime.memory_limit_mb to this process, a
// long-lived fleet member, unless GOGC or GOMEMLIMIT in the environment
// already say otherwise.
func (a *app) tuneRuntime() error {
	if err := a.cfg.Fleet.Check(); err != nil {
		return messages.Errorf(messages.CodeInvalidArgument, "%v", err)
	}
	r := a.cfg.Runtime
	if r.GCPercent < 1 {
		return messages.Errorf(messages.CodeInvalidArgument, "runtime.gc_percent %d: want 1 or more (100 is Go's default)", r.GCPercent)
	}
	if r.MemoryLimitMB < 0 || r.MemoryLimitMB > 1<<40 {
		return messages.Errorf(messages.CodeInvalidArgument, "runtime.memory_limit_mb %d: want 0 (none) to 2^40", r.MemoryLimitMB)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(r.GCPercent)
	}
	if r.MemoryLimitMB > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(r.MemoryLimitMB << 20)
	}
	return nil
}

// topology is the fleet's stream settings from the config.
func (a *app) topology() embedded.Topology {
	n := a.cfg.NATS
	return embedded.Topology{Replicas: n.Replicas, MaxRequestBytes: n.MaxRequestBytes, DLQMaxBytes: n.DLQ.MaxBytes, DLQMaxAge: n.DLQ.MaxAge,
		MemberTTL: a.cfg.Fleet.MemberTTL}
}

func (a *app) natsConn(name string) (*nats.Conn, jetstream.JetStream, error) {
	url := a.cfg.NATS.URL
	if url == "" {
		url = runningServe(a.cfg.Home)
	}
	if url == "" {
		return nil, nil, messages.Errorf(messages.CodeInvalidArgument, "no fleet: pass --nats URL (or AVFS_NATS_URL), or start `avfs serve`")
	}
	nc, err := connectNATS(a.cfg, url, name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// joinFleet connects a worker or dispatcher and makes sure the fleet's
// streams and buckets exist with the configured replicas.
func (a *app) joinFleet(ctx context.Context, name string) (*nats.Conn, error) {
	nc, js, err := a.natsConn(name)
	if err != nil {
		return nil, err
	}
	// A NATS cluster that just lost a node answers JetStream requests
	// again once its streams' leaders are elected (seconds): a worker
	// started meanwhile waits for that, as it would for its own node,
	// instead of exiting.
	deadline := time.Now().Add(joinWait)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		err := embedded.Setup(ctx, js, a.topology())
		if err == nil {
			return nc, nil
		}
		if !transient(err) || time.Now().After(deadline) || ctx.Err() != nil {
			nc.Close()
			return nil, err
		}
		a.log.Warn("fleet setup: JetStream not answering yet, trying again", telemetry.LogKeyErr, err)
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// joinWait bounds how long a joining worker or dispatcher waits for
// JetStream to answer its setup.
const joinWait = 2 * time.Minute

// transient reports a JetStream error worth another try: no answer in
// time, or no leader to answer yet.
func transient(err error) bool {
	var ae *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &ae) && ae.Code == 503
}

func (a *app) workerCmd() *cobra.Command {
	var id, httpAddr string
	c := &cobra.Command{
		Use: "worker --nats URL [--id ID] [--http HOST:PORT]", Short: "Join a fleet as a worker serving the vaults under --home", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.tuneRuntime(); err != nil {
				return err
			}
			nc, err := a.joinFleet(cmd.Context(), "avfs-worker")
			if err != nil {
				return err
			}
			defer nc.Close()
			if id == "" {
				if id, err = homeWorkerID(a.cfg.Home); err != nil {
					return err
				}
			}
			hs, stopMetrics, err := a.startMetrics(httpAddr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			fmt.Fprintf(a.stderr, "avfs worker %s serving %s\n", id, a.cfg.Home)
			if hs != nil {
				fmt.Fprintf(a.stderr, "avfs worker %s metrics on http://%s/metrics\n", id, hs.Addr)
			}
			return a.runWorker(cmd.Context(), nc, id)
		},
	}
	c.Flags().StringVar(&id, "id", "", "worker id (default: the one kept in $AVFS_HOME/worker-id, made from the hostname and a random suffix on first start)")
	c.Flags().StringVar(&httpAddr, "http", "", "host:port serving /metrics (Prometheus) and /healthz")
	return c
}

// startMetrics, given an address, builds the meter provider the worker
// records into and serves it there; stop ends both. Without an address
// metrics stay off and the returned server is nil.
func (a *app) startMetrics(addr string) (*telemetry.HTTPServer, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	mp, h, shutdown, err := telemetry.SetupMetrics(telemetry.MetricsConfig{Enabled: true, ServiceName: a.cfg.Telemetry.ServiceName})
	if err != nil {
		return nil, nil, err
	}
	hs, err := telemetry.ServeHTTP(addr, h)
	if err != nil {
		shutdown(context.Background())
		return nil, nil, messages.Errorf(messages.CodeUnavailable, "%v", err)
	}
	a.meter = mp
	return hs, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Stop(ctx); err != nil {
			a.log.Warn("stop http", telemetry.LogKeyErr, err)
		}
		shutdown(ctx)
	}, nil
}

func (a *app) dispatcherCmd() *cobra.Command {
	return &cobra.Command{
		Use: "dispatcher --nats URL", Short: "Join a fleet as a dispatcher", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.tuneRuntime(); err != nil {
				return err
			}
			nc, err := a.joinFleet(cmd.Context(), "avfs-dispatcher")
			if err != nil {
				return err
			}
			defer nc.Close()
			d, err := dispatcher.New(cmd.Context(), nc, dispatcher.Options{ID: newWorkerID(), Logger: a.log, Tracer: a.tracer, Heartbeat: a.cfg.Fleet.Heartbeat})
			if err != nil {
				return err
			}
			return d.Run(cmd.Context())
		},
	}
}

func (a *app) fleetCmd() *cobra.Command {
	c := &cobra.Command{Use: "fleet", Short: "Inspect the fleet"}
	c.AddCommand(&cobra.Command{
		Use: "status", Short: "Workers, their vaults, running execs and load", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, js, err := a.natsConn("avfs-cli")
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := dispatcher.Status(cmd.Context(), js)
			if err != nil {
				return messages.Errorf(messages.CodeUnavailable, "%v", err)
			}
			return a.emit(st)
		},
	})
	c.AddCommand(a.dlqCmd(), a.fleetGCCmd())
	return c
}

// fleetGCCmd removes the chunks no manifest references from the fleet's
// chunk bucket (worker.CollectChunks).
func (a *app) fleetGCCmd() *cobra.Command {
	var dryRun bool
	var settle time.Duration
	c := &cobra.Command{
		Use: "gc [--dry-run]", Short: "Delete the chunks in the fleet's buckets that no vault needs any more", Args: cobra.NoArgs,
		Long: `Delete from the fleet's chunk bucket (avfs_chunks) every chunk that no
manifest references, safe against pushes and forks running meanwhile. The
sweep announces itself, waits --settle (longer than a push may take, 2m30s
by default) so that pushes already running finish, then lists the
references and deletes the rest. --dry-run only counts.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if settle < 0 {
				return usagef("--settle %v: want a positive duration", settle)
			}
			nc, js, err := a.natsConn("avfs-cli")
			if err != nil {
				return err
			}
			defer nc.Close()
			res, err := worker.CollectChunks(cmd.Context(), js, worker.ChunkGCOptions{DryRun: dryRun, Settle: settle, By: a.actor()})
			if err != nil {
				var me *messages.Error
				if errors.As(err, &me) {
					return &requestError{me}
				}
				return messages.Errorf(messages.CodeUnavailable, "%v", err)
			}
			return a.emit(res)
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted, delete nothing")
	c.Flags().DurationVar(&settle, "settle", 0, "wait this long after announcing the sweep before listing references (default 2m30s: longer than a push may take)")
	return c
}

// dlqCmd inspects the dead-letter stream: requests that ran out of
// deliveries on a worker, or that no dispatcher could place.
func (a *app) dlqCmd() *cobra.Command {
	c := &cobra.Command{Use: "dlq", Short: "Dead-lettered requests: list, replay, drop"}
	// with runs fn on a JetStream context to the fleet.
	with := func(cmd *cobra.Command, fn func(context.Context, jetstream.JetStream) (any, error)) error {
		nc, js, err := a.natsConn("avfs-cli")
		if err != nil {
			return err
		}
		defer nc.Close()
		out, err := fn(cmd.Context(), js)
		if err != nil {
			var me *messages.Error
			if errors.As(err, &me) {
				return me
			}
			return messages.Errorf(messages.CodeUnavailable, "%v", err)
		}
		return a.emit(out)
	}
	seqArg := func(s string) (uint64, error) {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return 0, messages.Errorf(messages.CodeInvalidArgument, "dead-letter sequence %q: want a positive number", s)
		}
		return n, nil
	}
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "List dead-lettered requests with their reason", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				return dispatcher.DeadLetters(ctx, js)
			})
		},
	}, &cobra.Command{
		Use: "replay SEQ", Short: "Send a dead-lettered request again (same request id) and remove it from the list", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := seqArg(args[0])
			if err != nil {
				return err
			}
			return with(cmd, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				return dispatcher.Replay(ctx, js, a.tracer, seq)
			})
		},
	}, &cobra.Command{
		Use: "drop SEQ", Short: "Delete a dead-lettered request", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := seqArg(args[0])
			if err != nil {
				return err
			}
			return with(cmd, func(ctx context.Context, js jetstream.JetStream) (any, error) {
				return dispatcher.Drop(ctx, js, seq)
			})
		},
	})
	return c
}

// faultExitAfterKeep names an op: a worker started with it in its
// environment dies (SIGKILL of itself) once the fleet holds a change of
// that op and before the change's reply. Tests only (e2e).
const faultExitAfterKeep = "AVFS_TEST_FAULT_EXIT_AFTER_KEEP"

// faultNoCatchUp, set in a worker's environment, turns off its catch-up
// of copies ahead of the log (worker.ServeOptions.CatchUpEvery). Tests
// only (e2e).
const faultNoCatchUp = "AVFS_TEST_NO_CATCH_UP"
