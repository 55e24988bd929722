package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// The kill test (#14): clients stream acknowledged writes and
// appends into one vault while its owner, a real `avfs worker` process
// with its own store (another machine), is SIGKILLed at a random moment;
// twenty rounds, each against whichever worker of a pool owns the vault
// then. After each round every acknowledged change is there and none
// twice, though each client sends its unanswered request again under the
// same id until it is answered.
//
// The fleet runs with a short heartbeat and members TTL (fleet.heartbeat,
// fleet.member_ttl, as an operator may set them) so a round takes
// seconds; the failover time with the defaults is BenchmarkFailover's.

const (
	killRounds  = 20
	killClients = 8
	chaosBeat   = 250 * time.Millisecond
	chaosTTL    = time.Second
)

// streamers are clients that each send numbered requests to a vault, one
// at a time, each under its own request id: line L of client i appends
// "L\n" to /r<round>c<i>.log when L is even, and writes "L" over
// /r<round>c<i>.last when it is odd. A request not answered (its worker
// died, it timed out, the fleet said UNAVAILABLE) is sent again with the
// same id until it is. A request applied twice shows as a repeated line
// in the log, or as an older value in the last file (an old write
// applied again after a newer one).
type streamers struct {
	round int
	t     *testing.T
	c     *client.Client
	vault string
	acked []atomic.Int64 // lines acknowledged, per client
	tries atomic.Int64   // requests sent again
	stop  atomic.Bool
	wg    sync.WaitGroup
}

func startStreamers(t *testing.T, c *client.Client, vault string, n int, round int) *streamers {
	s := &streamers{t: t, c: c, vault: vault, round: round, acked: make([]atomic.Int64, n)}
	for i := range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for line := int64(0); !s.stop.Load(); line++ {
				a := messages.WriteArgs{Path: fmt.Sprintf("/r%dc%d.log", round, i), Content: []byte(fmt.Sprintf("%d\n", line)), Append: true}
				if line%2 == 1 {
					a = messages.WriteArgs{Path: fmt.Sprintf("/r%dc%d.last", round, i), Content: []byte(strconv.FormatInt(line, 10))}
				}
				args, _ := json.Marshal(a)
				req := messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: vault, Args: args,
					RequestID: fmt.Sprintf("r%d-c%d-l%d", round, i, line)}
				deadline := time.Now().Add(90 * time.Second)
				for {
					// A short wait (shorter than a failover): a request
					// caught by the kill is sent again (same id) while the
					// first copy still waits in the fleet for the takeover.
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					rep, err := c.Do(ctx, req)
					cancel()
					if err == nil && rep.Error == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("round %d client %d: line %d not acknowledged in 90 s: %v %v", round, i, line, err, rep.Error)
						return
					}
					s.tries.Add(1)
					time.Sleep(50 * time.Millisecond) // a client's pause between retries
				}
				s.acked[i].Store(line + 1)
			}
		}()
	}
	return s
}

// waitEach waits until every client has had at least n more lines
// acknowledged than it had at from.
func (s *streamers) waitEach(from []int64, n int64, what string) {
	s.t.Helper()
	poll.Until(s.t, 90*time.Second, what, func() (bool, error) {
		for i := range s.acked {
			if got := s.acked[i].Load(); got < from[i]+n {
				return false, fmt.Errorf("client %d at %d lines, want %d", i, got, from[i]+n)
			}
		}
		return true, nil
	})
}

func (s *streamers) now() []int64 {
	out := make([]int64, len(s.acked))
	for i := range s.acked {
		out[i] = s.acked[i].Load()
	}
	return out
}

func (s *streamers) end() []int64 {
	s.stop.Store(true)
	s.wg.Wait()
	return s.now()
}

// check reads every client's files: each acknowledged append is in the
// log once, in order, and the last file holds the last acknowledged
// write. It returns how many changes it checked.
func (s *streamers) check(acked []int64) int64 {
	s.t.Helper()
	read := func(path string) string {
		var cat messages.CatResult
		var err error
		for try := 0; try < 3; try++ { // a read changes nothing: asked again if slow
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = s.c.Call(ctx, "default", s.vault, messages.OpCat, messages.PathArgs{Path: path}, &cat)
			cancel()
			if err == nil {
				return *cat.Content
			}
		}
		s.t.Fatalf("round %d: %s: %v", s.round, path, err)
		return ""
	}
	var total int64
	for i, n := range acked {
		total += n
		var want strings.Builder
		for line := int64(0); line < n; line += 2 {
			fmt.Fprintf(&want, "%d\n", line)
		}
		if got := read(fmt.Sprintf("/r%dc%d.log", s.round, i)); got != want.String() {
			s.t.Fatalf("round %d client %d: %d lines acknowledged, log has %q, want %q", s.round, i, n, got, want.String())
		}
		if n < 2 {
			continue
		}
		last := n - 1
		if last%2 == 0 {
			last--
		}
		if got := read(fmt.Sprintf("/r%dc%d.last", s.round, i)); got != strconv.FormatInt(last, 10) {
			s.t.Fatalf("round %d client %d: last write acknowledged %d, file holds %q", s.round, i, last, got)
		}
	}
	return total
}

// pool is a set of `avfs worker` processes, each with its own home, that
// the kill rounds take turns killing: a killed worker is started again on
// its (now outdated) home once its vault is served elsewhere, and the
// next round does not wait for it.
type pool struct {
	f     *fleet
	url   func(id string) string // the NATS server(s) worker id connects to when it starts
	homes map[string]string
	mu    sync.Mutex
	procs map[string]*exec.Cmd
}

func startPool(f *fleet, ids []string, url func(id string) string) *pool {
	f.t.Helper()
	p := &pool{f: f, url: url, homes: map[string]string{}, procs: map[string]*exec.Cmd{}}
	for _, id := range ids {
		p.homes[id] = f.t.TempDir()
		cmd, err := f.startWorkerProcessOn(url(id), p.homes[id], id)
		if err != nil {
			f.t.Fatal(err)
		}
		p.procs[id] = cmd
	}
	f.waitMembers(ids...)
	return p
}

func (p *pool) kill(id string) {
	p.f.t.Helper()
	p.mu.Lock()
	cmd := p.procs[id]
	p.mu.Unlock()
	killWorker(p.f.t, cmd)
}

func (p *pool) restart(id string) {
	p.f.t.Helper()
	cmd, err := p.f.startWorkerProcessOn(p.url(id), p.homes[id], id)
	if err != nil {
		p.f.t.Fatal(err)
	}
	p.mu.Lock()
	p.procs[id] = cmd
	p.mu.Unlock()
}

// revive starts again every worker of the pool whose process exited on
// its own: one started while a NATS node was down may give up joining
// (a bucket's leader was not elected within its timeout), as a process
// supervisor would see it exit and start it again.
func (p *pool) revive() {
	p.f.t.Helper()
	p.mu.Lock()
	var gone []string
	for id, cmd := range p.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if _, after, ok := strings.Cut(string(b), ") "); err != nil || ok && strings.HasPrefix(after, "Z") {
			cmd.Wait()
			gone = append(gone, id)
		}
	}
	p.mu.Unlock()
	for _, id := range gone {
		p.f.t.Logf("worker %s exited on its own: started again", id)
		p.restart(id)
	}
}

// waitOthers waits until a worker other than id heartbeats: the vault
// has somewhere to go when id dies.
func (p *pool) waitOthers(js jetstream.JetStream, id string) {
	p.f.t.Helper()
	poll.Until(p.f.t, 60*time.Second, "another live worker than "+id, func() (bool, error) {
		st, err := dispatcher.Status(context.Background(), js)
		if err != nil {
			return false, err
		}
		for _, w := range st.Workers {
			if w.ID != id {
				return true, nil
			}
		}
		return false, fmt.Errorf("members %+v", st.Workers)
	})
}

// killRoundsOptions tune runKillRounds.
type killRoundsOptions struct {
	// during, if set, is called in round r while the clients stream,
	// before the kill (a NATS node stopped, an exec...).
	during func(round int)
	// after, if set, is called at the end of round r, once its changes
	// were checked.
	after func(round int)
}

// runKillRounds runs the kill rounds on vault v (which must exist) of a
// fleet whose workers are p's, through client c.
func runKillRounds(t *testing.T, p *pool, c *client.Client, v string, o killRoundsOptions) {
	js, _ := jetstream.New(p.f.conn())
	call, must := vaultCaller(t, c, v, 60*time.Second)
	owner := func() string {
		var info messages.VaultResult
		must(call(messages.OpVaultInfo, nil, &info))
		return info.Vault.Worker
	}
	var changes, retried int64
	var failovers []time.Duration
	for round := 1; round <= killRounds; round++ {
		start := time.Now()
		p.revive()
		victim := owner()
		p.waitOthers(js, victim)
		s := startStreamers(t, c, v, killClients, round)
		s.waitEach(make([]int64, killClients), 4+int64(rand.IntN(8)), "lines acknowledged before the kill")
		if o.during != nil {
			o.during(round)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond) // a random moment of the stream
		before := s.now()
		killed := time.Now()
		p.kill(victim)
		s.waitEach(before, 3, "lines acknowledged after the kill")
		took := time.Since(killed)
		failovers = append(failovers, took)
		acked := s.end()
		if now := owner(); now == victim {
			t.Fatalf("round %d: vault still served by %s, which was killed", round, victim)
		}
		n := s.check(acked)
		changes += n
		retried += s.tries.Load()
		t.Logf("round %d: killed %s; 3 more changes each acknowledged %v later; %d changes all there once; %d requests sent again; round took %v",
			round, victim, took.Round(time.Millisecond), n, s.tries.Load(), time.Since(start).Round(time.Millisecond))
		if o.after != nil {
			o.after(round)
		}
		p.restart(victim) // back on its outdated store; the next round does not wait for it
	}
	t.Logf("%d rounds: %d acknowledged changes, 0 lost, 0 applied twice; %d requests sent again; kill to 3 more changes each: %v",
		killRounds, changes, retried, durations(failovers))
}

// durations summarizes ds as min / p50 / max.
func durations(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("min %v, p50 %v, max %v", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// TestAcknowledgedChangesOutliveTheirWorker is the kill test on
// one NATS server: 8 clients, 20 rounds, a pool of three worker
// processes. In round 2 an exec's effect and a checkpoint acknowledged
// just before the kill survive it, and the exec's retry is answered from
// its stored result.
func TestAcknowledgedChangesOutliveTheirWorker(t *testing.T) {
	f := startFleet(t, withTimings(chaosBeat, chaosTTL))
	p := startPool(f, []string{"k1", "k2", "k3"}, func(string) string { return f.url })
	c := f.client()
	ctx := context.Background()
	call, must := vaultCaller(t, c, "dur", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	execReq := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "dur", RequestID: "exec-once"}
	execReq.Args, _ = json.Marshal(messages.ExecArgs{Argv: []string{"sh", "-c", "echo ran >> exec.txt"}})
	runKillRounds(t, p, c, "dur", killRoundsOptions{
		during: func(round int) {
			if round != 2 {
				return
			}
			rep, err := c.Do(ctx, execReq)
			must(err)
			if rep.Error != nil {
				t.Fatal(rep.Error)
			}
			must(call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "acked"}, nil))
		},
		after: func(round int) {
			if round < 2 {
				return
			}
			var cps messages.CheckpointListResult
			must(call(messages.OpCheckpointList, nil, &cps))
			found := false
			for _, cp := range cps.Checkpoints {
				found = found || cp.Name == "acked"
			}
			if !found {
				t.Fatalf("round %d: checkpoint acknowledged in round 2 is gone: %+v", round, cps.Checkpoints)
			}
			if round != 2 {
				return
			}
			// The exec's effect is there once, and its retry is answered
			// from its stored result rather than run again.
			rep, err := c.Do(ctx, execReq)
			must(err)
			if rep.Error != nil {
				t.Fatal(rep.Error)
			}
			var cat messages.CatResult
			must(call(messages.OpCat, messages.PathArgs{Path: "/exec.txt"}, &cat))
			if *cat.Content != "ran\n" {
				t.Fatalf("exec's effect after the failover and a retry: %q", *cat.Content)
			}
		},
	})
}

// natsCluster is three JetStream servers n1..n3 routed to each other, any
// of which can be stopped and started again on its own store.
type natsCluster struct {
	t       testing.TB
	opts    []*server.Options
	mu      sync.Mutex
	servers []*server.Server
	down    [3]bool
}

func startNATSCluster(t testing.TB) *natsCluster {
	t.Helper()
	cports := freePorts(t, 3)
	routes := make([]string, 3)
	for i, p := range cports {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	c := &natsCluster{t: t, opts: make([]*server.Options, 3), servers: make([]*server.Server, 3)}
	for i := range c.opts {
		c.opts[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
			Cluster: server.ClusterOpts{Name: "avfs", Host: "127.0.0.1", Port: cports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		c.start(i)
	}
	t.Cleanup(func() {
		for _, ns := range c.servers {
			if ns != nil {
				ns.Shutdown()
			}
		}
	})
	poll.Until(t, 30*time.Second, "JetStream cluster ready", func() (bool, error) {
		leader, current := false, 0
		for _, ns := range c.servers {
			if ns.JetStreamIsLeader() {
				leader = true
			}
			if ns.JetStreamIsCurrent() && ns.NumRoutes() >= 2 {
				current++
			}
		}
		return leader && current == 3, fmt.Errorf("leader %v, current %d/3", leader, current)
	})
	return c
}

// start runs node i (again: on the store it had).
func (c *natsCluster) start(i int) {
	c.t.Helper()
	o := *c.opts[i]
	ns, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		c.t.Fatalf("%s did not start in 20 s", o.ServerName)
	}
	c.mu.Lock()
	c.servers[i], c.down[i] = ns, false
	c.mu.Unlock()
}

func (c *natsCluster) stop(i int) {
	c.mu.Lock()
	ns := c.servers[i]
	c.down[i] = true
	c.mu.Unlock()
	ns.Shutdown()
	ns.WaitForShutdown()
}

// running says whether node i runs.
func (c *natsCluster) running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down[i]
}

// whole waits until every replica of every stream is current: then any
// one node may stop without a stream losing its quorum.
func (c *natsCluster) whole(js jetstream.JetStream) {
	c.t.Helper()
	poll.Until(c.t, 90*time.Second, "every stream's replicas current", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return false, err
			}
			ci := st.CachedInfo().Cluster
			if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
				return false, fmt.Errorf("stream %s: cluster %+v", name, ci)
			}
			for _, r := range ci.Replicas {
				if !r.Current || r.Offline {
					return false, fmt.Errorf("stream %s: replica %s current %v offline %v lag %d", name, r.Name, r.Current, r.Offline, r.Lag)
				}
			}
		}
		return names.Err() == nil, names.Err()
	})
}

// TestAcknowledgedChangesOutliveTheirWorkerOnACluster is the kill test on
// a three-node NATS cluster (JetStream, streams and buckets with 3
// replicas) that loses a node: the dispatcher and the clients are on n1,
// the three worker processes on n2. In round 3 n3 stops (a node with
// neither clients nor workers: only replicas and maybe leaders), in round
// 8 it comes back, and in round 11 n2 stops, with every worker on it:
// they reconnect to n1 or n3. Every round kills the vault's owner as on
// one server; 0 acknowledged changes lost, 0 applied twice.
func TestAcknowledgedChangesOutliveTheirWorkerOnACluster(t *testing.T) {
	nc := startNATSCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, ns: nc.servers[0], url: nc.servers[0].ClientURL(), cancel: cancel, beat: chaosBeat, ttl: chaosTTL}
	js, _ := jetstream.New(f.conn())
	poll.Until(t, 30*time.Second, "setup R3", func() (bool, error) {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		err := embedded.Setup(sctx, js, embedded.Topology{Replicas: 3, MemberTTL: chaosTTL})
		return err == nil, err
	})
	d, err := dispatcher.New(ctx, f.conn(), dispatcher.Options{ID: "d1", Heartbeat: chaosBeat,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	f.wg.Add(1)
	go func() { defer f.wg.Done(); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	f.beat, f.ttl = chaosBeat, chaosTTL
	t.Setenv("AVFS_NATS_REPLICAS", "3") // the workers' setup keeps 3 replicas
	// On n2 while it runs; a worker started again after n2 stopped
	// connects to the nodes that run.
	p := startPool(f, []string{"q1", "q2", "q3"}, func(string) string {
		if nc.running(1) {
			return nc.servers[1].ClientURL()
		}
		var urls []string
		for i := range nc.servers {
			if nc.running(i) {
				urls = append(urls, nc.servers[i].ClientURL())
			}
		}
		return strings.Join(urls, ",")
	})
	c := f.client()
	call, must := vaultCaller(t, c, "cdur", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	runKillRounds(t, p, c, "cdur", killRoundsOptions{
		during: func(round int) {
			switch round {
			case 3:
				nc.stop(2)
				t.Logf("round 3: n3 stopped")
			case 11:
				nc.stop(1)
				t.Logf("round 11: n2 stopped, with the workers on it")
			}
		},
		after: func(round int) {
			if round == 8 {
				nc.start(2)
				nc.whole(js)
				t.Logf("round 8: n3 back, every stream current")
			}
		},
	})
}
