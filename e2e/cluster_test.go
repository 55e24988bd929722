package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// freePorts reserves n loopback ports and releases them, so that the
// cluster's route URLs can be written before its servers start.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// startCluster runs three JetStream servers n1..n3 in one cluster "avfs",
// each routed to all three, and waits until the JetStream meta group has a
// leader and every server is current with it.
func startCluster(t testing.TB) []*server.Server {
	t.Helper()
	cports := freePorts(t, 3)
	routes := make([]string, 3)
	for i, p := range cports {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
			Cluster: server.ClusterOpts{Name: "avfs", Host: "127.0.0.1", Port: cports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(ns.Shutdown)
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("n%d did not start in 10s", i+1)
		}
		servers[i] = ns
	}
	poll.Until(t, 20*time.Second, "JetStream cluster ready", func() (bool, error) {
		leader, current := false, 0
		for _, ns := range servers {
			if ns.JetStreamIsLeader() {
				leader = true
			}
			if ns.JetStreamIsCurrent() && ns.NumRoutes() >= 2 {
				current++
			}
		}
		return leader && current == len(servers), fmt.Errorf("leader %v, current %d/3", leader, current)
	})
	return servers
}

// clusterConn connects to the cluster preferring servers[first], and
// fails over to the others (in order) when that one goes away.
func clusterConn(t testing.TB, servers []*server.Server, first int) *nats.Conn {
	t.Helper()
	urls := make([]string, 0, len(servers))
	for i := range servers {
		urls = append(urls, servers[(first+i)%len(servers)].ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(),
		nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// connectedTo names the server nc is connected to.
func connectedTo(nc *nats.Conn) string { return nc.ConnectedServerName() }

// ownerOf reads a vault's owner from the owners bucket.
func ownerOf(ctx context.Context, kv jetstream.KeyValue, ns, vault string) string {
	e, err := kv.Get(ctx, ns+"."+vault)
	if err != nil {
		return ""
	}
	var o messages.Owner
	json.Unmarshal(e.Value(), &o)
	return o.Worker
}

// TestClusterKeepsAcknowledgedWritesWhenANodeStops runs the fleet on a
// three-node NATS cluster with R3 streams and buckets: dispatcher on n1,
// worker w1 on n2, worker w2 on n3, clients spread over the three. While
// clients write, n3 stops: w2 and the clients on n3 reconnect to n1/n2,
// every write acknowledged before or after is read back with its content,
// and new requests are served by both workers with two nodes of three.
func TestClusterKeepsAcknowledgedWritesWhenANodeStops(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("the fleet tests need /dev/fuse: %v", err)
	}
	start := time.Now()
	servers := startCluster(t)
	t.Logf("cluster ready in %v", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dnc := clusterConn(t, servers, 0)
	js, _ := jetstream.New(dnc)
	// Streams are placed by the meta leader; retry while the peers settle.
	poll.Until(t, 20*time.Second, "setup R3", func() (bool, error) {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		err := embedded.Setup(sctx, js, embedded.Topology{Replicas: 3})
		return err == nil, err
	})
	for _, name := range []string{messages.StreamRequests, messages.StreamWork} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}

	dctx, dcancel := context.WithCancel(context.Background())
	d, err := dispatcher.New(dctx, dnc, dispatcher.Options{ID: "d1", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	var dwg sync.WaitGroup
	dwg.Add(1)
	go func() { defer dwg.Done(); d.Run(dctx) }()
	t.Cleanup(func() { dcancel(); dwg.Wait() })

	w1nc, w2nc := clusterConn(t, servers, 1), clusterConn(t, servers, 2)
	startWorker(t, w1nc, "w1", nil, nil)
	startWorker(t, w2nc, "w2", nil, nil)
	if got := []string{connectedTo(dnc), connectedTo(w1nc), connectedTo(w2nc)}; strings.Join(got, ",") != "n1,n2,n3" {
		t.Fatalf("dispatcher, w1, w2 connected to %v, want n1, n2, n3", got)
	}
	poll.Until(t, 15*time.Second, "workers w1 and w2 join", func() (bool, error) {
		st, err := dispatcher.Status(ctx, js)
		n := 0
		for _, w := range st.Workers {
			if w.ID == "w1" || w.ID == "w2" {
				n++
			}
		}
		if err == nil && n != 2 {
			err = fmt.Errorf("members %+v", st.Workers)
		}
		return err == nil && n == 2, err
	})

	// One client per node; each fails over to the others. The client on
	// n2 sends everything through the intake (R3 streams), the others
	// send a vault's requests directly to its worker once they know it:
	// both paths must keep what they acknowledged.
	clients := make([]*client.Client, 3)
	for i := range clients {
		c, err := client.New(clusterConn(t, servers, i))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	clients[1].DisableDirect = true
	owners, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	// Create vaults until both workers own some (placement spreads them
	// by a hash of the name); bounded.
	var vaults []string
	owner := map[string]string{}
	for i := 0; i < 12 && (len(vaults) < 4 || len(distinct(owner)) < 2); i++ {
		name := fmt.Sprintf("cv%02d", i)
		cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
		err := clients[i%3].Call(cctx, "default", name, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
		ccancel()
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		vaults = append(vaults, name)
		owner[name] = ownerOf(ctx, owners, "default", name)
	}
	if len(distinct(owner)) < 2 {
		t.Fatalf("vaults did not spread over both workers: %v", owner)
	}
	t.Logf("fleet ready in %v; owners %v", time.Since(start).Round(time.Millisecond), owner)

	// Writers: one per vault, sequential, each through the client of
	// node (vault index mod 3). A write is recorded only once its reply
	// says it succeeded.
	type ack struct {
		vault, path, content string
		after                bool // acknowledged after n3 stopped
	}
	var (
		mu       sync.Mutex
		acked    []ack
		failed   int
		stopped  bool
		stopWrit = make(chan struct{})
		wg       sync.WaitGroup
	)
	writeDeadline := time.Now().Add(45 * time.Second)
	for vi, v := range vaults {
		wg.Add(1)
		go func(vi int, v string) {
			defer wg.Done()
			c := clients[vi%3]
			after := 0 // a writer stops after 40 writes acknowledged after the stop
			for seq := 0; time.Now().Before(writeDeadline) && after < 40; seq++ {
				select {
				case <-stopWrit:
					return
				default:
				}
				path := fmt.Sprintf("/f-%04d.txt", seq)
				content := fmt.Sprintf("%s/%d written through n%d", v, seq, vi%3+1)
				wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
				err := c.Call(wctx, "default", v, messages.OpWrite, messages.WriteArgs{Path: path, Content: []byte(content)}, nil)
				wcancel()
				mu.Lock()
				if err == nil {
					acked = append(acked, ack{v, path, content, stopped})
					if stopped {
						after++
					}
				} else {
					failed++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}(vi, v)
	}
	count := func(after bool, byOwner string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range acked {
			if a.after == after && (byOwner == "" || owner[a.vault] == byOwner) {
				n++
			}
		}
		return n
	}
	waitFor := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		if poll.For(limit, what, func() (bool, error) { return ok(), nil }) != nil {
			close(stopWrit)
			wg.Wait()
			t.Fatalf("%s within %v: %d acknowledged, %d failed or timed out", what, limit, len(acked), failed)
		}
	}
	waitFor("40 writes acknowledged before the stop", 15*time.Second, func() bool { return count(false, "") >= 40 })

	// Stop n3 while writes are in flight: w2 and the n3 client lose
	// their node and reconnect to n1 or n2.
	mu.Lock()
	stopped = true
	mu.Unlock()
	stoppedAt := time.Now()
	servers[2].Shutdown()
	waitFor("w2 reconnected to a surviving node", 10*time.Second, func() bool {
		s := connectedTo(w2nc)
		return w2nc.IsConnected() && (s == "n1" || s == "n2")
	})
	t.Logf("w2 reconnected to %s after %v", connectedTo(w2nc), time.Since(stoppedAt).Round(time.Millisecond))
	// New writes are served on both workers' vaults with 2 nodes of 3.
	waitFor("writes to w1's and w2's vaults acknowledged after the stop", 30*time.Second, func() bool {
		return count(true, "w1") >= 20 && count(true, "w2") >= 20
	})
	close(stopWrit)
	wg.Wait()
	t.Logf("writes: %d acknowledged before the stop, %d after (both targets met %v after the stop), %d failed or timed out",
		count(false, ""), count(true, ""), time.Since(stoppedAt).Round(time.Millisecond), failed)

	// Every acknowledged write reads back with its content, through a
	// client on a surviving node; ownership did not move. A read whose
	// reply does not come in time is sent again (reads change nothing),
	// at most twice, and logged: that is liveness, not loss.
	r := clients[1]
	retried := 0
	for _, a := range acked {
		var cat messages.CatResult
		var err error
		for try := 0; try < 3; try++ {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			err = r.Call(rctx, "default", a.vault, messages.OpCat, messages.PathArgs{Path: a.path}, &cat)
			rcancel()
			if err == nil {
				break
			}
			retried++
			t.Logf("read %s%s, try %d: %v; %s", a.vault, a.path, try+1, err, consumerState(ctx, js, "worker-"+owner[a.vault]))
		}
		if err != nil {
			t.Fatalf("acknowledged write %s%s (after stop: %v) unreadable: %v", a.vault, a.path, a.after, err)
		}
		if cat.Content == nil || *cat.Content != a.content {
			t.Fatalf("acknowledged write %s%s reads %v, want %q", a.vault, a.path, cat.Content, a.content)
		}
	}
	for _, v := range vaults {
		if o := ownerOf(ctx, owners, "default", v); o != owner[v] {
			t.Fatalf("vault %s moved from %s to %s: a worker was taken for dead", v, owner[v], o)
		}
	}
	t.Logf("verified %d acknowledged writes (%d reads sent again); total %v", len(acked), retried, time.Since(start).Round(time.Millisecond))
}

// distinct returns the set of values in m.
func distinct(m map[string]string) map[string]bool {
	s := map[string]bool{}
	for _, v := range m {
		if v != "" {
			s[v] = true
		}
	}
	return s
}

// consumerState summarizes a consumer of the work stream, for logs.
func consumerState(ctx context.Context, js jetstream.JetStream, name string) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := js.Consumer(cctx, messages.StreamWork, name)
	if err != nil {
		return name + ": " + err.Error()
	}
	ci, err := c.Info(cctx)
	if err != nil {
		return name + ": " + err.Error()
	}
	return fmt.Sprintf("%s: pending %d, ack pending %d, redelivered %d, waiting pulls %d, leader %s",
		name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Cluster.Leader)
}
