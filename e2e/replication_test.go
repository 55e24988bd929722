package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

// streamers are clients that each append numbered lines to their own
// file of a vault, one request per line, each line under its own request
// id; a request not answered (its worker died, it timed out, the fleet
// said UNAVAILABLE) is sent again with the same id until it is.
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
			for line := s.acked[i].Load(); !s.stop.Load(); line++ {
				args, _ := json.Marshal(messages.WriteArgs{Path: fmt.Sprintf("/r%dc%d.txt", round, i), Content: []byte(fmt.Sprintf("%d\n", line)), Append: true})
				req := messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: vault, Args: args,
					RequestID: fmt.Sprintf("r%d-c%d-l%d", round, i, line)}
				deadline := time.Now().Add(90 * time.Second)
				for try := 0; ; try++ {
					// A short wait: a request caught by the kill is sent
					// again (same id) while the first copy still waits
					// in the fleet for the takeover.
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					rep, err := c.Do(ctx, req)
					cancel()
					if err == nil && rep.Error == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("client %d: line %d not acknowledged in 90 s: %v %v", i, line, err, rep.Error)
						return
					}
					s.tries.Add(1)
					time.Sleep(50 * time.Millisecond)
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

// check reads every client's file: each acknowledged line is there,
// once, in order (a retried request applied twice shows as a repeated
// line).
func (s *streamers) check(acked []int64) {
	s.t.Helper()
	for i, n := range acked {
		var cat messages.CatResult
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := s.c.Call(ctx, "default", s.vault, messages.OpCat, messages.PathArgs{Path: fmt.Sprintf("/r%dc%d.txt", s.round, i)}, &cat)
		cancel()
		if err != nil {
			s.t.Fatalf("client %d's file: %v", i, err)
		}
		var want strings.Builder
		for line := range n {
			fmt.Fprintf(&want, "%d\n", line)
		}
		if got := *cat.Content; got != want.String() {
			s.t.Fatalf("client %d: %d lines acknowledged, file has %q", i, n, got)
		}
	}
}

// TestAcknowledgedChangesOutliveTheirWorker streams acknowledged appends
// from 8 clients into one vault while its owner is SIGKILLed (a real
// process with its own store: another machine), twice: the second time
// the first worker is back with its outdated store and takes the vault
// again. Every acknowledged line is on the new owner, none twice though
// each client retries its unanswered request with the same id; a
// checkpoint acknowledged just before a kill survives it, and so does an
// exec's effect, whose retry is answered from its stored result.
func TestAcknowledgedChangesOutliveTheirWorker(t *testing.T) {
	f := startFleet(t)
	home1 := t.TempDir()
	w1 := f.startWorkerProcess(home1, "k1")
	f.waitMembers("k1")
	c := f.client()
	ctx := context.Background()
	call, must := vaultCaller(t, c, "dur", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	w2 := f.startWorkerProcess(t.TempDir(), "k2")
	f.waitMembers("k2")

	owner := func() string {
		var info messages.VaultResult
		must(call(messages.OpVaultInfo, nil, &info))
		return info.Vault.Worker
	}
	procs := map[string]*exec.Cmd{"k1": w1, "k2": w2}
	for round := 1; round <= 2; round++ {
		victim := owner()
		s := startStreamers(t, c, "dur", 8, round)
		s.waitEach(make([]int64, 8), 10+int64(rand.IntN(10)), "lines acknowledged before the kill")
		var exec1 messages.Envelope
		execReq := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "dur", RequestID: fmt.Sprintf("exec-%d", round)}
		execReq.Args, _ = json.Marshal(messages.ExecArgs{Argv: []string{"sh", "-c", "echo ran >> exec.txt"}})
		if round == 2 {
			rep, err := c.Do(ctx, execReq)
			must(err)
			if rep.Error != nil {
				t.Fatal(rep.Error)
			}
			json.Unmarshal(rep.Result, &exec1)
			must(call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "acked"}, nil))
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond) // a random moment of the stream
		before := s.now()
		killed := time.Now()
		killWorker(t, procs[victim])
		s.waitEach(before, 5, "lines acknowledged after the kill")
		t.Logf("round %d: killed %s; 5 more lines each acknowledged %v later", round, victim, time.Since(killed).Round(time.Millisecond))
		acked := s.end()
		if now := owner(); now == victim {
			t.Fatalf("round %d: vault still served by %s, which was killed", round, victim)
		}
		s.check(acked)
		var total int64
		for _, n := range acked {
			total += n
		}
		t.Logf("round %d: %d lines acknowledged, all there once; %d requests sent again", round, total, s.tries.Load())
		if round == 2 {
			var cps messages.CheckpointListResult
			must(call(messages.OpCheckpointList, nil, &cps))
			found := false
			for _, cp := range cps.Checkpoints {
				found = found || cp.Name == "acked"
			}
			if !found {
				t.Fatalf("checkpoint acknowledged before the kill is gone: %+v", cps.Checkpoints)
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
		}
		if round == 1 {
			// The killed worker comes back on its own (now outdated)
			// store, to take the vault when the other one dies.
			procs[victim] = f.startWorkerProcess(home1, victim)
			f.waitMembers(victim)
		}
	}
}

// TestPausedOwnerCannotAppend holds a write on its owner after the
// handler made it and before its change log entry is appended (the
// owner paused at the worst moment), moves the vault to another worker
// meanwhile (as a dispatcher does when a heartbeat lapses), and serves a
// write there. The old owner, let go, still believes it owns the vault,
// but its append expects a log sequence that the new owner's takeover
// moved: it is refused, and the write is not acknowledged, nor found on
// the new owner; the old owner then sends the vault's requests on.
func TestPausedOwnerCannotAppend(t *testing.T) {
	f := startFleet(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	home := t.TempDir()
	st, err := vault.Open(context.Background(), filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	serveStore(t, f.conn(), "o1", home, st, nil, nil, func(o *worker.ServeOptions) {
		// Between the handler and the change log's append.
		o.WrapChange = func(next handler.Core) handler.Core {
			return handler.CoreFunc(func(ctx context.Context, c handler.Call) (any, error) {
				res, err := next.Serve(ctx, c)
				if strings.Contains(string(c.Request.Args), `"/held.txt"`) {
					once.Do(func() { close(entered) })
					<-release
				}
				return res, err
			})
		}
	})
	f.waitMembers("o1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "pz", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	f.addWorker("o2")
	held := make(chan messages.Reply, 1)
	go func() {
		held <- f.askWorker("o1", "default", "pz", messages.OpWrite, messages.WriteArgs{Path: "/held.txt", Content: []byte("never acknowledged")})
	}()
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("the held write never reached its append")
	}
	js, _ := jetstream.New(f.conn())
	kv, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	old, rev := ownerRecord(t, kv, "default", "pz")
	b, _ := json.Marshal(messages.Owner{Worker: "o2", Epoch: old.Epoch + 1})
	if _, err := kv.Update(ctx, "default.pz", b, rev); err != nil {
		t.Fatal(err)
	}
	if rep := f.askWorker("o2", "default", "pz", messages.OpWrite, messages.WriteArgs{Path: "/new.txt", Content: []byte("on o2")}); rep.Error != nil {
		t.Fatalf("write on the new owner: %v", rep.Error)
	}
	close(release)
	rep := <-held
	if rep.Error == nil || rep.Error.Code != messages.CodeUnavailable || !strings.Contains(rep.Error.Message, "not replicated") {
		t.Fatalf("the paused owner's write after it lost the vault: %+v, want UNAVAILABLE from its refused append", rep.Error)
	}
	var e *messages.Error
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "pz", messages.OpCat, messages.PathArgs{Path: "/held.txt"}, &cat); !errors.As(err, &e) || e.Code != messages.CodeNotFound {
		t.Fatalf("the refused write is on the new owner (err %v)", err)
	}
	if err := c.Call(ctx, "default", "pz", messages.OpCat, messages.PathArgs{Path: "/new.txt"}, &cat); err != nil || *cat.Content != "on o2" {
		t.Fatalf("/new.txt: %v", err)
	}
	// Asked again, the old owner no longer serves the vault: the request
	// reaches the new owner.
	if rep := f.askWorker("o1", "default", "pz", messages.OpWrite, messages.WriteArgs{Path: "/later.txt", Content: []byte("via o1")}); rep.Error != nil {
		t.Fatalf("write sent to the old owner: %v", rep.Error)
	}
	var info messages.VaultResult
	if err := c.Call(ctx, "default", "pz", messages.OpVaultInfo, nil, &info); err != nil || info.Vault.Worker != "o2" {
		t.Fatalf("vault served by %q (%v), want o2", info.Vault.Worker, err)
	}
}

// TestReplicationModes switches a vault between the replication modes:
// each switch pushes a snapshot that names the mode; sync and async
// changes go to the change log (async ones just after their reply),
// checkpoint ones do not; a mode that does not exist is refused.
func TestReplicationModes(t *testing.T) {
	f := startFleet(t)
	f.addWorker("m1")
	c := f.client()
	ctx := context.Background()
	call, must := vaultCaller(t, c, "modes", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	var set messages.VaultSettingsResult
	must(call(messages.OpVaultSettings, nil, &set))
	if set.Settings.Replication != "sync" {
		t.Fatalf("default replication %q, want sync", set.Settings.Replication)
	}
	js, _ := jetstream.New(f.conn())
	stream, err := js.Stream(ctx, messages.StreamLog)
	if err != nil {
		t.Fatal(err)
	}
	last := func() messages.ChangeEntry {
		t.Helper()
		m, err := stream.GetLastMsgForSubject(ctx, messages.LogSubject("default", "modes"))
		if err != nil {
			t.Fatal(err)
		}
		var e messages.ChangeEntry
		must(json.Unmarshal(m.Data, &e))
		return e
	}
	heads, err := js.KeyValue(ctx, messages.BucketHeads)
	must(err)
	head := func() messages.Head {
		t.Helper()
		e, err := heads.Get(ctx, messages.VaultKey("default", "modes"))
		must(err)
		var hd messages.Head
		must(json.Unmarshal(e.Value(), &hd))
		return hd
	}
	write := func(path string) {
		t.Helper()
		must(call(messages.OpWrite, messages.WriteArgs{Path: path, Content: []byte(path)}, nil))
	}
	write("/s.txt")
	if e := last(); e.Kind != messages.LogOp || e.Request == nil || !strings.Contains(string(e.Request.Args), "/s.txt") {
		t.Fatalf("last entry after a sync write: %+v", e)
	}
	must(call(messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: "checkpoint"}, &set))
	if hd := head(); hd.Replication != "checkpoint" || hd.Reason != "replication" {
		t.Fatalf("head after the switch to checkpoint: %+v", hd)
	}
	before := last()
	write("/c.txt")
	if e := last(); e.Request != nil && strings.Contains(string(e.Request.Args), "/c.txt") || e.Kind != before.Kind || e.Time != before.Time {
		t.Fatalf("a checkpoint-mode write went to the log: %+v", e)
	}
	must(call(messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: "async"}, &set))
	if hd := head(); hd.Replication != "async" {
		t.Fatalf("head after the switch to async: %+v", hd)
	}
	write("/a.txt")
	poll.Until(t, 10*time.Second, "the async write logged", func() (bool, error) {
		e := last()
		return e.Request != nil && strings.Contains(string(e.Request.Args), "/a.txt"), fmt.Errorf("last entry %+v", e)
	})
	var e *messages.Error
	if err := call(messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: "sometimes"}, nil); !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
		t.Fatalf("replication sometimes: %v", err)
	}
	must(call(messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: "default"}, &set))
	if set.Settings.Replication != "sync" {
		t.Fatalf("replication default: %+v", set.Settings)
	}
}

// TestExecWhoseWorkerDiesBeforeItsReply kills a worker (it SIGKILLs
// itself: a test fault) after its exec's effects are held by the fleet
// and before the envelope is sent. The request reaches the next owner,
// on another machine, which answers it from the stored result: the
// command's effect is there once, and the caller gets the first run's
// envelope.
func TestExecWhoseWorkerDiesBeforeItsReply(t *testing.T) {
	f := startFleet(t)
	f.startWorkerProcess(t.TempDir(), "x1", "AVFS_TEST_FAULT_EXIT_AFTER_KEEP=exec.run")
	f.waitMembers("x1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "ex", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	f.startWorkerProcess(t.TempDir(), "x2")
	f.waitMembers("x2")
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "ex", RequestID: "exec-once"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Argv: []string{"sh", "-c", "echo ran >> exec.txt; echo $RANDOM"}})
	var env messages.Envelope
	deadline := time.Now().Add(90 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		rep, err := c.Do(cctx, req)
		cancel()
		if err == nil && rep.Error == nil {
			if err := json.Unmarshal(rep.Result, &env); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec not answered in 90 s: %v %v", err, rep.Error)
		}
	}
	if env.Worker != "x1" {
		t.Fatalf("envelope from %q, want the first run's, on x1 (answered from its stored result)", env.Worker)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "ex", messages.OpCat, messages.PathArgs{Path: "/exec.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "ran\n" {
		t.Fatalf("exec.txt after the worker died before the reply: %q, want one run", *cat.Content)
	}
	var info messages.VaultResult
	if err := c.Call(ctx, "default", "ex", messages.OpVaultInfo, nil, &info); err != nil || info.Vault.Worker != "x2" {
		t.Fatalf("vault on %q (%v), want x2", info.Vault.Worker, err)
	}
}
