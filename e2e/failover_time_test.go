package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// pair is two `avfs worker` processes, each with its own home (two
// machines as far as stores go), that the failover tests kill and
// restart in turn.
type pair struct {
	f     *fleet
	homes map[string]string
	procs map[string]*exec.Cmd
}

func startPair(f *fleet) *pair {
	f.t.Helper()
	p := &pair{f: f, homes: map[string]string{}, procs: map[string]*exec.Cmd{}}
	for _, id := range []string{"fa", "fb"} {
		p.homes[id] = f.t.TempDir()
		p.procs[id] = f.startWorkerProcess(p.homes[id], id)
	}
	f.waitMembers("fa", "fb")
	return p
}

// waitHead waits until vault v has a copy in the fleet's buckets (its
// create's push is made after the reply): until t14's log, a vault taken
// over on another machine starts from its last push.
func (p *pair) waitHead(v string) {
	p.f.t.Helper()
	js, _ := jetstream.New(p.f.conn())
	heads, err := js.KeyValue(context.Background(), messages.BucketHeads)
	if err != nil {
		p.f.t.Fatal(err)
	}
	poll.Until(p.f.t, 30*time.Second, v+" pushed", func() (bool, error) {
		_, err := heads.Get(context.Background(), messages.VaultKey("default", v))
		return err == nil, err
	})
}

// owner asks the fleet which worker serves vault v.
func (p *pair) owner(ctx context.Context, v string) string {
	p.f.t.Helper()
	var info messages.VaultResult
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.f.client().Call(cctx, "default", v, messages.OpVaultInfo, nil, &info); err != nil {
		p.f.t.Fatalf("vault info %s: %v", v, err)
	}
	return info.Vault.Worker
}

// killAndSend SIGKILLs worker id and, at once, sends send from a fresh
// client (one that knows no owner, as a new CLI process); it returns
// send's error and how long after the kill it was answered. The killed
// worker is started again on its home afterwards, so the pair is whole
// for the next round.
func (p *pair) killAndSend(id string, send func(ctx context.Context) error) (time.Duration, error) {
	p.f.t.Helper()
	done := make(chan error, 1)
	killed := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- send(ctx)
	}()
	killWorker(p.f.t, p.procs[id])
	err := <-done
	took := time.Since(killed)
	p.procs[id] = p.f.startWorkerProcess(p.homes[id], id)
	p.f.waitMembers(id)
	return took, err
}

// BenchmarkFailover measures failover time: from SIGKILL of a vault's
// owner to the vault served again by the other worker (separate stores),
// as seen by a cat sent right after the kill, which waits. Ten kills,
// alternating workers, with the default heartbeat and TTL; reports p50
// and max in seconds.
func BenchmarkFailover(b *testing.B) {
	f := startFleet(b)
	p := startPair(f)
	ctx := context.Background()
	c := f.client()
	if err := c.Call(ctx, "default", "fo", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		b.Fatal(err)
	}
	if err := c.Call(ctx, "default", "fo", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("x")}, nil); err != nil {
		b.Fatal(err)
	}
	p.waitHead("fo")
	const kills = 10
	var times []time.Duration
	for i := 0; i < b.N; i++ {
		for k := 0; k < kills; k++ {
			owner := p.owner(ctx, "fo")
			took, err := p.killAndSend(owner, func(ctx context.Context) error {
				var cat messages.CatResult
				return f.client().Call(ctx, "default", "fo", messages.OpCat, messages.PathArgs{Path: "/a.txt"}, &cat)
			})
			if err != nil {
				b.Fatalf("kill %d of %s: cat failed after %v: %v", k+1, owner, took, err)
			}
			b.Logf("kill %d of %s: served again after %v", k+1, owner, took.Round(time.Millisecond))
			times = append(times, took)
		}
	}
	reportFailoverTimes(b, times)
}

// reportFailoverTimes reports the median and the longest of times, the
// failovers a benchmark measured.
func reportFailoverTimes(b *testing.B, times []time.Duration) {
	slices.Sort(times)
	b.ReportMetric(times[len(times)/2].Seconds(), "p50-s")
	b.ReportMetric(times[len(times)-1].Seconds(), "max-s")
}

// TestRequestDuringFailoverSucceeds sends a write (with a request id) and
// a cat right after the vault's owner is SIGKILLed: both wait for the
// failover and succeed, served by the other worker, and the write took
// effect once.
func TestRequestDuringFailoverSucceeds(t *testing.T) {
	f := startFleet(t)
	p := startPair(f)
	ctx := context.Background()
	c := f.client()
	if err := c.Call(ctx, "default", "fw", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	p.waitHead("fw")
	owner := p.owner(ctx, "fw")
	other := map[string]string{"fa": "fb", "fb": "fa"}[owner]
	took, err := p.killAndSend(owner, func(ctx context.Context) error {
		c := f.client()
		req := messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: "fw", RequestID: "during-failover"}
		req.Args = []byte(`{"path":"/during.txt","content":"ZHVyaW5n","append":true}`)
		rep, err := c.Do(ctx, req)
		if err != nil {
			return err
		}
		if rep.Error != nil {
			return rep.Error
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a write sent during the failover failed after %v: %v", took, err)
	}
	t.Logf("the write sent at the kill was answered after %v", took.Round(time.Millisecond))
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "fw", messages.OpCat, messages.PathArgs{Path: "/during.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "during" {
		t.Fatalf("/during.txt = %q, want the write applied once", *cat.Content)
	}
	if got := p.owner(ctx, "fw"); got != other {
		t.Fatalf("vault served by %q after %s was killed, want %s", got, owner, other)
	}
}

// TestVaultListWholeWithKilledOwner: `vault list` answers every vault of
// the namespace whatever the state of its owner. Vaults spread over two
// worker processes with their own stores; one is SIGKILLed and the list,
// asked through the CLI at once (before any failover) and again after
// the dead worker's vaults moved, names them all, with the dead worker as
// the owner the first time.
func TestVaultListWholeWithKilledOwner(t *testing.T) {
	f := startFleet(t)
	p := startPair(f)
	ctx := context.Background()
	c := f.client()
	const n = 6
	want := map[string]bool{}
	for i := range n {
		v := fmt.Sprintf("lv%d", i)
		if err := c.Call(ctx, "default", v, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
			t.Fatal(err)
		}
		want[v] = true
	}
	owners := map[string]string{}
	for v := range want {
		owners[v] = p.owner(ctx, v)
	}
	victim := owners["lv0"]
	var onVictim int
	for _, w := range owners {
		if w == victim {
			onVictim++
		}
	}
	if onVictim == n {
		t.Fatalf("every vault landed on %s: nothing to compare", victim)
	}
	list := func(when string) map[string]string {
		t.Helper()
		out, err := exec.Command(binary(t), "vault", "list", "--nats", f.url, "--json", "--home", t.TempDir()).Output()
		if err != nil {
			t.Fatalf("vault list %s: %v", when, err)
		}
		var res messages.VaultListResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("vault list %s: %v\n%s", when, err, out)
		}
		got := map[string]string{}
		for _, v := range res.Vaults {
			got[v.Name] = v.Worker
		}
		for v := range want {
			if _, ok := got[v]; !ok {
				t.Errorf("vault list %s: %s (owner %s) missing from %v", when, v, owners[v], got)
			}
		}
		return got
	}
	killWorker(t, p.procs[victim])
	got := list("right after its owner was killed")
	for v, w := range owners {
		if w == victim && got[v] != victim {
			t.Errorf("right after the kill, %s listed on %q, want its dead owner %s", v, got[v], victim)
		}
	}
	// Once the dead worker's vaults are served elsewhere, still all.
	for v, w := range owners {
		if w == victim {
			if got := p.owner(ctx, v); got == victim {
				t.Fatalf("%s still served by the killed %s", v, victim)
			}
		}
	}
	list("after the failover")
}

// BenchmarkFailoverAfterALongLog is BenchmarkFailover at its worst: the
// vault's log holds nearly snapshotEvery entries when its owner is
// killed (4,900 writes since its last snapshot, from 16 callers), so
// the new owner replays all of them before it answers. Five kills;
// reports p50 and max in seconds.
func BenchmarkFailoverAfterALongLog(b *testing.B) {
	f := startFleet(b)
	p := startPair(f)
	ctx := context.Background()
	c := f.client()
	if err := c.Call(ctx, "default", "long", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		b.Fatal(err)
	}
	p.waitHead("long")
	const kills, writes, callers = 5, 4900, 16
	var times []time.Duration
	for i := 0; i < b.N; i++ {
		for k := 0; k < kills; k++ {
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for w := 0; w < callers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := w; j < writes; j += callers {
						args := messages.WriteArgs{Path: fmt.Sprintf("/w%02d-%d.txt", w, j%50), Content: []byte(fmt.Sprint(j))}
						if err := c.Call(ctx, "default", "long", messages.OpWrite, args, nil); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			owner := p.owner(ctx, "long")
			took, err := p.killAndSend(owner, func(ctx context.Context) error {
				var cat messages.CatResult
				return f.client().Call(ctx, "default", "long", messages.OpCat, messages.PathArgs{Path: fmt.Sprintf("/w00-%d.txt", (writes-callers)%50)}, &cat)
			})
			if err != nil {
				b.Fatalf("kill %d of %s: cat failed after %v: %v", k+1, owner, took, err)
			}
			b.Logf("kill %d of %s after %d writes: served again after %v", k+1, owner, writes, took.Round(time.Millisecond))
			times = append(times, took)
		}
	}
	reportFailoverTimes(b, times)
}

// TestExecThatChangedNothingKeptByItsResult: in sync mode, an exec that
// changes no file is kept by a result entry in the vault's change log,
// not by a snapshot push (the vault's head does not move). Its owner is
// SIGKILLed right after the reply: the retry under the same request id
// is answered by the other worker (own store) from the stored envelope,
// not run again, and that worker's audit log has the exec's event once.
func TestExecThatChangedNothingKeptByItsResult(t *testing.T) {
	f := startFleet(t)
	p := startPair(f)
	ctx := context.Background()
	c := f.client()
	if err := c.Call(ctx, "default", "quiet", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	p.waitHead("quiet")
	rev := headRevision(t, f, "quiet")
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "quiet", RequestID: "quiet-exec"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Argv: []string{"echo", "quiet"}})
	run := func(ctx context.Context, c interface {
		Do(context.Context, messages.Request) (messages.Reply, error)
	}) (messages.Envelope, error) {
		var env messages.Envelope
		rep, err := c.Do(ctx, req)
		if err != nil {
			return env, err
		}
		if rep.Error != nil {
			return env, rep.Error
		}
		return env, json.Unmarshal(rep.Result, &env)
	}
	env, err := run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusCompleted || env.Checkpoint != nil || env.Changes == nil || len(env.Changes.Added)+len(env.Changes.Modified)+len(env.Changes.Deleted) != 0 {
		t.Fatalf("exec: %+v, want completed with no change and no checkpoint", env)
	}
	if now := headRevision(t, f, "quiet"); now != rev {
		t.Fatalf("an exec that changed nothing moved the vault's head (revision %d to %d): a snapshot was pushed", rev, now)
	}
	owner := p.owner(ctx, "quiet")
	var again messages.Envelope
	took, err := p.killAndSend(owner, func(ctx context.Context) error {
		var err error
		again, err = run(ctx, f.client())
		return err
	})
	if err != nil {
		t.Fatalf("retry after the kill of %s: %v (after %v)", owner, err, took)
	}
	if again.StartedAt != env.StartedAt || again.Stdout != env.Stdout {
		t.Fatalf("retry after the kill ran the command again: started %s, stdout %q; first %s, %q", again.StartedAt, again.Stdout, env.StartedAt, env.Stdout)
	}
	if now := p.owner(ctx, "quiet"); now == owner {
		t.Fatalf("vault still served by the killed %s", owner)
	}
	var audit messages.AuditResult
	if err := c.Call(ctx, "default", "quiet", messages.OpAudit, messages.AuditArgs{Action: "exec.run"}, &audit); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range audit.Events {
		if e.RequestID == req.RequestID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the new owner's audit log has %d exec.run events of %s, want 1: %+v", n, req.RequestID, audit.Events)
	}
}
