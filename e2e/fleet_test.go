package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

type fleet struct {
	t      testing.TB
	ns     *server.Server
	url    string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	tp     trace.TracerProvider // given to every part of the fleet; nil = none
	// beat and ttl, when set, are the fleet's heartbeat and members TTL
	// (config fleet.heartbeat, fleet.member_ttl): the dispatcher's and
	// the worker processes' (withTimings).
	beat, ttl time.Duration
}

// fleetOption tunes startFleet.
type fleetOption func(*fleet)

// withTracer gives the dispatcher, the workers and the clients tp.
func withTracer(tp trace.TracerProvider) fleetOption { return func(f *fleet) { f.tp = tp } }

// withTimings gives the fleet a heartbeat and members TTL of its own, as
// an operator sets fleet.heartbeat and fleet.member_ttl: the kill tests
// use short ones so that a round does not wait out the default failover
// (which BenchmarkFailover measures).
func withTimings(beat, ttl time.Duration) fleetOption {
	return func(f *fleet) { f.beat, f.ttl = beat, ttl }
}

// timingEnv is the environment that gives a worker process the fleet's
// timings (none when the fleet keeps the defaults).
func (f *fleet) timingEnv() []string {
	if f.beat == 0 {
		return nil
	}
	return []string{"AVFS_FLEET_HEARTBEAT=" + f.beat.String(), "AVFS_FLEET_MEMBER_TTL=" + f.ttl.String()}
}

func startFleet(t testing.TB, opts ...fleetOption) *fleet {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("the fleet tests need /dev/fuse: %v", err)
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, ns: ns, url: ns.ClientURL(), cancel: cancel}
	for _, o := range opts {
		o(f)
	}
	nc := f.conn()
	js, _ := jetstream.New(nc)
	if err := embedded.Setup(ctx, js, embedded.Topology{MemberTTL: f.ttl}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, nc, dispatcher.Options{ID: "d1", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), Tracer: f.tp, Heartbeat: f.beat})
	if err != nil {
		t.Fatal(err)
	}
	f.wg.Add(1)
	go func() { defer f.wg.Done(); d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		f.wg.Wait()
		ns.Shutdown()
	})
	return f
}

func (f *fleet) conn() *nats.Conn {
	f.t.Helper()
	nc, err := nats.Connect(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// addWorker starts a worker with its own home and store, and returns the
// store; mp, if given, receives the worker's metrics.
func (f *fleet) addWorker(id string, mp ...metric.MeterProvider) *vault.Store {
	f.t.Helper()
	var m metric.MeterProvider
	if len(mp) > 0 {
		m = mp[0]
	}
	store := startWorker(f.t, f.conn(), id, f.tp, m)
	// Wait for the worker's first heartbeat so placement can see it.
	f.waitMembers(id)
	return store
}

// startWorker runs worker id on nc, with its own home and store, until
// the test ends, and returns the store; tp and mp may be nil.
func startWorker(t testing.TB, nc *nats.Conn, id string, tp trace.TracerProvider, mp metric.MeterProvider) *vault.Store {
	t.Helper()
	st, _ := startStoppableWorker(t, nc, id, tp, mp)
	return st
}

// startStoppableWorker is startWorker that also returns stop, which ends
// the worker as a graceful stop does (idempotent; the test's end calls it
// too). The store stays open until the test ends.
func startStoppableWorker(t testing.TB, nc *nats.Conn, id string, tp trace.TracerProvider, mp metric.MeterProvider) (*vault.Store, func()) {
	t.Helper()
	home := t.TempDir()
	st, err := vault.Open(context.Background(), filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, serveStore(t, nc, id, home, st, tp, mp)
}

// nodeOptions are the node options of test worker id under home: the
// policy falls back to allow_with_checkpoint; st, tp and mp may be nil
// (st: the node opens home's store itself).
func nodeOptions(home, id string, st *vault.Store, tp trace.TracerProvider, mp metric.MeterProvider) node.Options {
	cfg := &config.Config{Home: home}
	cfg.Policy.Fallback = "allow_with_checkpoint"
	return node.Options{Config: cfg, Store: st, Worker: id, Tracer: tp, Meter: mp, Serving: true}
}

// openNode opens a node as production does (node.Open) and closes it
// when the test ends.
func openNode(t testing.TB, o node.Options) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// serveStore runs worker id on nc over store st (under home) until stop
// is called or the test ends; st stays open. The worker is composed as
// `avfs worker` composes it (worker.Open).
func serveStore(t testing.TB, nc *nats.Conn, id, home string, st *vault.Store, tp trace.TracerProvider, mp metric.MeterProvider, opts ...func(*worker.ServeOptions)) (stop func()) {
	t.Helper()
	ctx := context.Background()
	o := worker.ServeOptions{ID: id, Tracer: tp}
	for _, fn := range opts {
		fn(&o)
	}
	m, err := worker.Open(ctx, nc, worker.Options{Node: nodeOptions(home, id, st, tp, mp), Serve: o})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(wctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			m.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// vaultCaller returns call, which sends op on vault (namespace
// "default") through c within timeout, and must, which fails the test on
// a call's error.
func vaultCaller(t testing.TB, c *client.Client, vault string, timeout time.Duration) (call func(op messages.Op, args, out any) error, must func(error)) {
	call = func(op messages.Op, args, out any) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Call(ctx, "default", vault, op, args, out)
	}
	must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	return call, must
}

func (f *fleet) client() *client.Client {
	f.t.Helper()
	c, err := client.New(f.conn())
	if err != nil {
		f.t.Fatal(err)
	}
	c.Timeout = 60 * time.Second
	c.Tracer = f.tp
	return c
}

func TestFleetServesRequests(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	var vr messages.VaultResult
	if err := c.Call(ctx, "default", "v1", messages.OpVaultCreate, messages.VaultCreateArgs{}, &vr); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "default", "v1", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("hi")}, nil); err != nil {
		t.Fatal(err)
	}
	env, err := c.Exec(ctx, "default", "v1", messages.ExecArgs{Shell: "cat a.txt; echo more >> a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusCompleted || env.Stdout != "hi" || env.Worker != "w1" || len(env.Changes.Modified) != 1 {
		t.Fatalf("envelope through the fleet: %+v", env)
	}
	err = c.Call(ctx, "default", "nope", messages.OpVaultInfo, nil, nil)
	if me, ok := err.(*messages.Error); !ok || me.Code != messages.CodeVaultNotFound {
		t.Fatalf("missing vault: %v", err)
	}
}

func TestSameRequestTwiceHasOneEffect(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(messages.WriteArgs{Path: "/log", Content: []byte("x"), Append: true})
	req := messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: "v", RequestID: "dup-1", Args: args}
	for i := 0; i < 3; i++ {
		rep, err := c.Do(ctx, req)
		if err != nil || rep.Error != nil {
			t.Fatalf("send %d: %v %v", i, err, rep.Error)
		}
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/log"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "x" {
		t.Fatalf("the same request id applied more than once: %q", *cat.Content)
	}
}

func TestMalformedMessageGetsErrorAndWorkerKeepsServing(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	nc := f.conn()
	js, _ := jetstream.New(nc)
	inbox := nc.NewInbox()
	sub, _ := nc.SubscribeSync(inbox)
	m := nats.NewMsg(messages.RequestSubject("default", "v", messages.OpWrite))
	m.Data = []byte("{not json")
	m.Header.Set(messages.HeaderReplyTo, inbox)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	rm, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no reply to a malformed request: %v", err)
	}
	var rep messages.Reply
	json.Unmarshal(rm.Data, &rep)
	if rep.Error == nil || rep.Error.Code != messages.CodeInvalidArgument {
		t.Fatalf("reply: %s", rm.Data)
	}
	// A body that claims another namespace than its subject is refused.
	body, _ := json.Marshal(messages.Request{Op: messages.OpVaultList, Namespace: "other"})
	m = nats.NewMsg(messages.RequestSubject("default", "", messages.OpVaultList))
	m.Data = body
	m.Header.Set(messages.HeaderReplyTo, inbox)
	js.PublishMsg(context.Background(), m)
	rm, err = sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(rm.Data, &rep)
	if rep.Error == nil || rep.Error.Code != messages.CodePermissionDenied {
		t.Fatalf("namespace spoof: %s", rm.Data)
	}
	if err := f.client().Call(context.Background(), "default", "after", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatalf("worker stopped serving: %v", err)
	}
}

func TestVaultsSpreadAcrossWorkersAndRunInParallel(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	envs := make([]messages.Envelope, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("attempt-%02d", i)
			if errs[i] = c.Call(ctx, "default", name, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); errs[i] != nil {
				return
			}
			envs[i], errs[i] = c.Exec(ctx, "default", name, messages.ExecArgs{Shell: fmt.Sprintf("echo %d > out.txt; cat out.txt", i)})
		}(i)
	}
	wg.Wait()
	byWorker := map[string]int{}
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
		if envs[i].Stdout != fmt.Sprintf("%d\n", i) || len(envs[i].Changes.Added) != 1 {
			t.Fatalf("attempt %d: %+v", i, envs[i])
		}
		byWorker[envs[i].Worker]++
	}
	if len(byWorker) != 2 {
		t.Fatalf("16 vaults all landed on %v", byWorker)
	}
}

func TestWorkersAreDiscoverableAsMicroServices(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	nc := f.conn()
	inbox := nc.NewInbox()
	sub, _ := nc.SubscribeSync(inbox)
	if err := nc.PublishRequest("$SRV.INFO.avfs-worker", inbox, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("workers found by $SRV.INFO: %v (%v)", seen, err)
		}
		var info struct {
			Metadata map[string]string `json:"metadata"`
		}
		json.Unmarshal(m.Data, &info)
		seen[info.Metadata["worker"]] = true
	}
	if !seen["w1"] || !seen["w2"] {
		t.Fatalf("discovered %v", seen)
	}
	m, err := nc.Request(messages.SubjectRoot+".worker.w1.status", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mem messages.Member
	if err := json.Unmarshal(m.Data, &mem); err != nil || mem.ID != "w1" {
		t.Fatalf("status endpoint: %s %v", m.Data, err)
	}
}

func TestReplyToMustBeAnInbox(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "victim", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	// A request whose reply-to names another namespace's delete subject:
	// the reply must not turn into a request.
	nc := f.conn()
	js, _ := jetstream.New(nc)
	body, _ := json.Marshal(messages.Request{Op: messages.OpVaultList, Namespace: "attacker"})
	m := nats.NewMsg(messages.RequestSubject("attacker", "", messages.OpVaultList))
	m.Data = body
	m.Header.Set(messages.HeaderReplyTo, messages.RequestSubject("victim", "v", messages.OpVaultDelete))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	bad := nats.NewMsg(messages.SubjectRequest + ".malformed")
	bad.Header.Set(messages.HeaderReplyTo, messages.WorkSubject("w1", "victim", "v", messages.OpVaultDelete))
	js.PublishMsg(ctx, bad)
	// The attacker's own request is served; then the vault must still be there.
	if err := c.Call(ctx, "attacker", "", messages.OpVaultList, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Both forged messages were taken off the intake, and whatever the
	// dispatcher sent on was served (a work queue keeps a message until
	// it is acked, after it ran): a forged delete would have run by now.
	poll.Until(t, 10*time.Second, "intake and work streams drained", func() (bool, error) {
		for _, name := range []string{messages.StreamRequests, messages.StreamWork} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false, err
			}
			info, err := s.Info(ctx)
			if err != nil || info.State.Msgs > 0 {
				return false, err
			}
		}
		return true, nil
	})
	if err := c.Call(ctx, "victim", "v", messages.OpVaultInfo, nil, nil); err != nil {
		t.Fatalf("the victim's vault after forged reply subjects: %v", err)
	}
}
