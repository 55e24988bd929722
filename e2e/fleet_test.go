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
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/embedded"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
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
}

// fleetOption tunes startFleet.
type fleetOption func(*fleet)

// withTracer gives the dispatcher, the workers and the clients tp.
func withTracer(tp trace.TracerProvider) fleetOption { return func(f *fleet) { f.tp = tp } }

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
	if err := embedded.Setup(ctx, js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, nc, dispatcher.Options{ID: "d1", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), Tracer: f.tp})
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

// serveStore runs worker id on nc over store st (under home) until stop
// is called or the test ends; st stays open.
func serveStore(t testing.TB, nc *nats.Conn, id, home string, st *vault.Store, tp trace.TracerProvider, mp metric.MeterProvider, opts ...func(*worker.ServeOptions)) (stop func()) {
	t.Helper()
	ctx := context.Background()
	h := handler.New(st, handler.Options{Worker: id, Tracer: tp, Meter: mp})
	cfg := &config.Config{Home: home}
	cfg.Policy.Fallback = "allow_with_checkpoint"
	cleanup, err := runner.Wire(cfg, h, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	o := worker.ServeOptions{ID: id, Tracer: tp}
	for _, fn := range opts {
		fn(&o)
	}
	srv, err := worker.NewServer(nc, h, o)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(wctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cleanup()
		})
	}
	t.Cleanup(stop)
	return stop
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
	time.Sleep(200 * time.Millisecond) // give a forged delete the time it would need
	if err := c.Call(ctx, "victim", "v", messages.OpVaultInfo, nil, nil); err != nil {
		t.Fatalf("the victim's vault after forged reply subjects: %v", err)
	}
}
