package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

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

// TestRetriedForkAfterItsSourceOwnerDied: a fork is acknowledged, the
// source's owner (a worker process with its own store) is SIGKILLed, and
// the agent, which never saw the reply, sends the fork again with the
// same request id. It lands on the source's new owner, which answers it
// from the stored result (not VAULT_EXISTS), and the fork holds the
// source's files once.
func TestRetriedForkAfterItsSourceOwnerDied(t *testing.T) {
	f := startFleet(t, withTimings(chaosBeat, chaosTTL))
	f1 := f.startWorkerProcess(t.TempDir(), "fk1")
	f.waitMembers("fk1")
	c := f.client()
	call, must := vaultCaller(t, c, "fsrc", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("in the source")}, nil))
	f.startWorkerProcess(t.TempDir(), "fk2")
	f.waitMembers("fk2")
	req := messages.Request{Op: messages.OpVaultFork, Namespace: "default", Vault: "fsrc", RequestID: "fork-once"}
	req.Args, _ = json.Marshal(messages.VaultForkArgs{Target: "fdst"})
	ctx := context.Background()
	rep, err := c.Do(ctx, req)
	if err != nil || rep.Error != nil {
		t.Fatalf("fork: %v %v", err, rep.Error)
	}
	var first messages.ForkResult
	must(json.Unmarshal(rep.Result, &first))
	killWorker(t, f1)
	var again messages.ForkResult
	poll.Until(t, 60*time.Second, "the retried fork answered", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rep, err := c.Do(cctx, req)
		if err != nil {
			return false, err // (the fleet is failing over: sent again)
		}
		if rep.Error != nil {
			if rep.Error.Code == messages.CodeUnavailable {
				return false, rep.Error
			}
			t.Fatalf("the retried fork after its source's owner died: %v, want the stored result", rep.Error)
		}
		return true, json.Unmarshal(rep.Result, &again)
	})
	if again.Vault.Name != "fdst" || again.Vault.Name != first.Vault.Name {
		t.Fatalf("retried fork answered %+v, first answer %+v", again.Vault, first.Vault)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "fdst", messages.OpCat, messages.PathArgs{Path: "/a.txt"}, &cat); err != nil || *cat.Content != "in the source" {
		t.Fatalf("the fork's file: %v", err)
	}
	var info messages.VaultResult
	must(call(messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != "fk2" {
		t.Fatalf("source served by %q, want fk2", info.Vault.Worker)
	}
}

// TestMountWritesKeptBySnapshots: writes through a worker's mount
// (mount.start) are held by the fleet from the vault's next snapshot:
// the one the owner pushes on its own within about a second (its copy is
// ahead of the log), the one the next change through the fleet's API
// pushes before its reply, and the one mount.stop pushes before its
// reply. The owner, a worker process with its own store, is SIGKILLed
// after each, and the next owner (another machine) has the mount's
// files.
func TestMountWritesKeptBySnapshots(t *testing.T) {
	f := startFleet(t, withTimings(chaosBeat, chaosTTL))
	homes := map[string]string{"mk1": t.TempDir(), "mk2": t.TempDir()}
	procs := map[string]*exec.Cmd{}
	for id, home := range homes {
		procs[id] = f.startWorkerProcess(home, id)
	}
	f.waitMembers("mk1", "mk2")
	c := f.client()
	call, must := vaultCaller(t, c, "mnt", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	owner := func() string {
		var info messages.VaultResult
		must(call(messages.OpVaultInfo, nil, &info))
		return info.Vault.Worker
	}
	cat := func(path string) string {
		var res messages.CatResult
		must(call(messages.OpCat, messages.PathArgs{Path: path}, &res))
		return *res.Content
	}
	headRev := func() uint64 { return headRevision(t, f, "mnt") }
	for round, how := range []string{"nothing", "write", "mount.stop"} {
		victim := owner()
		dir := t.TempDir()
		args := messages.MountArgs{Dir: dir, Machine: runner.MachineID()}
		must(call(messages.OpMountStart, args, nil))
		file := fmt.Sprintf("through-the-mount-%d.txt", round)
		if err := os.WriteFile(filepath.Join(dir, file), []byte(how), 0o644); err != nil {
			t.Fatal(err)
		}
		switch how {
		case "nothing":
			// No request: the owner sees its copy ahead of the log and
			// pushes a snapshot by itself.
			rev := headRev()
			poll.Until(t, 30*time.Second, "a snapshot holding the mount's write", func() (bool, error) {
				return headRev() != rev, nil
			})
		case "write":
			// close(2) returned: committed to the owner's store; the next
			// change through the fleet pushes the copy, ahead of the log.
			must(call(messages.OpWrite, messages.WriteArgs{Path: "/api.txt", Content: []byte("api")}, nil))
		case "mount.stop":
			must(call(messages.OpMountStop, args, nil))
		}
		killWorker(t, procs[victim])
		syscall.Unmount(dir, syscall.MNT_DETACH) // the dead worker's mount (gone already after mount.stop)
		if got := cat("/" + file); got != how {
			t.Fatalf("after %s and the kill of %s: %s holds %q", how, victim, file, got)
		}
		if now := owner(); now == victim {
			t.Fatalf("vault still served by the killed %s", victim)
		}
		procs[victim] = f.startWorkerProcess(homes[victim], victim)
		f.waitMembers(victim)
	}
}

// TestMountFsyncHeldByTheFleet writes through a worker's mount
// (mount.start) with the workers' catch-up of copies ahead of the log
// turned off, so that nothing but the fsync itself can have the fleet
// hold the write, and SIGKILLs the owner as soon as the fsync returned:
// the next owner serves the file's content. Once through a file's fsync,
// once through a close and the fsync of the mount's root directory.
func TestMountFsyncHeldByTheFleet(t *testing.T) {
	f := startFleet(t, withTimings(chaosBeat, chaosTTL))
	homes := map[string]string{"fs1": t.TempDir(), "fs2": t.TempDir()}
	procs := map[string]*exec.Cmd{}
	const noCatchUp = "AVFS_TEST_NO_CATCH_UP=1"
	for id, home := range homes {
		procs[id] = f.startWorkerProcess(home, id, noCatchUp)
	}
	f.waitMembers("fs1", "fs2")
	c := f.client()
	call, must := vaultCaller(t, c, "synced", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	owner := func() string {
		var info messages.VaultResult
		must(call(messages.OpVaultInfo, nil, &info))
		return info.Vault.Worker
	}
	for round, how := range []string{"file", "dir"} {
		victim := owner()
		dir := t.TempDir()
		must(call(messages.OpMountStart, messages.MountArgs{Dir: dir, Machine: runner.MachineID()}, nil))
		name := fmt.Sprintf("fsynced-%d.txt", round)
		content := []byte(strings.Repeat("held by fsync via "+how+"\n", 1000))
		fh, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		must(err)
		_, err = fh.Write(content)
		must(err)
		switch how {
		case "file":
			must(fh.Sync())
			killWorker(t, procs[victim])
			fh.Close() // (fails: the server is gone)
		case "dir":
			must(fh.Close())
			d, err := os.Open(dir)
			must(err)
			must(d.Sync())
			killWorker(t, procs[victim])
			d.Close()
		}
		syscall.Unmount(dir, syscall.MNT_DETACH)
		var res messages.CatResult
		must(call(messages.OpCat, messages.PathArgs{Path: "/" + name}, &res))
		if got := *res.Content; got != string(content) {
			t.Fatalf("fsync through %s's mount (%s), then SIGKILL: %s holds %d bytes, want %d", victim, how, name, len(got), len(content))
		}
		if now := owner(); now == victim {
			t.Fatalf("vault still served by the killed %s", victim)
		}
		procs[victim] = f.startWorkerProcess(homes[victim], victim, noCatchUp)
		f.waitMembers(victim)
	}
}

// TestMountFsyncFailsOnceVaultLost mounts a vault on its owner
// (mount.start), moves the vault to another worker behind the owner's
// back (as a dispatcher does when a heartbeat lapses), and writes through
// the old owner's mount: its fsync cannot be held by the fleet (the old
// owner's snapshot is fenced off), so it fails with EIO instead of
// acknowledging a write the new owner does not have.
func TestMountFsyncFailsOnceVaultLost(t *testing.T) {
	f := startFleet(t)
	call, must, dir := mountedOnOwner(t, f, "lo1", "lost", func(o *worker.ServeOptions) { o.CatchUpEvery = -1 })
	must(writeThrough(dir, "before.txt", true))
	f.addWorker("lo2")
	handOver(t, f, "lost", "lo2")
	if rep := f.askWorker("lo2", "default", "lost", messages.OpWrite, messages.WriteArgs{Path: "/on-lo2.txt", Content: []byte("lo2")}); rep.Error != nil {
		t.Fatalf("write on the new owner: %v", rep.Error)
	}
	if err := writeThrough(dir, "after.txt", true); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync through the old owner's mount after it lost the vault: %v, want EIO", err)
	}
	var cat messages.CatResult
	must(call(messages.OpCat, messages.PathArgs{Path: "/before.txt"}, &cat))
	if *cat.Content != "before.txt" {
		t.Fatalf("/before.txt on the new owner: %q", *cat.Content)
	}
}

// TestMountWritesHeldAgainAfterTheLogRefusedAnAppend mounts a vault on
// its owner (mount.start) and has the change log refuse every append for
// a while (its stream's message size limit lowered under every entry),
// as a NATS outage would: an fsync meanwhile fails with EIO. Once the
// log takes entries again, with no request to the vault in between, the
// owner takes its log over again by itself: what the mount committed
// meanwhile (a closed file, the failed fsync's file) is held by the
// fleet within seconds, and the next fsync succeeds. A second worker,
// handed the vault, serves all of it.
func TestMountWritesHeldAgainAfterTheLogRefusedAnAppend(t *testing.T) {
	f := startFleet(t)
	_, must, dir := mountedOnOwner(t, f, "rt1", "lapse")
	ctx := context.Background()
	must(writeThrough(dir, "before.txt", true))

	js, _ := jetstream.New(f.conn())
	stream, err := js.Stream(ctx, messages.StreamLog)
	must(err)
	info, err := stream.Info(ctx)
	must(err)
	cfg := info.Config
	limit := cfg.MaxMsgSize
	cfg.MaxMsgSize = 8 // under any entry: every append is refused
	_, err = js.UpdateStream(ctx, cfg)
	must(err)
	if err := writeThrough(dir, "refused.txt", true); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync while the log refuses appends: %v, want EIO", err)
	}
	must(writeThrough(dir, "closed.txt", false))
	rev := headRevision(t, f, "lapse")
	cfg.MaxMsgSize = limit
	_, err = js.UpdateStream(ctx, cfg)
	must(err)
	poll.Until(t, 30*time.Second, "a snapshot holding what the mount committed while the log refused appends", func() (bool, error) {
		return headRevision(t, f, "lapse") != rev, nil
	})
	must(writeThrough(dir, "after.txt", true))

	// The vault moved to another worker: it serves everything the mount
	// committed.
	f.addWorker("rt2")
	handOver(t, f, "lapse", "rt2")
	for _, name := range []string{"before.txt", "refused.txt", "closed.txt", "after.txt"} {
		rep := f.askWorker("rt2", "default", "lapse", messages.OpCat, messages.PathArgs{Path: "/" + name})
		if rep.Error != nil {
			t.Fatalf("cat /%s on the new owner: %v", name, rep.Error)
		}
		var res messages.CatResult
		must(json.Unmarshal(rep.Result, &res))
		if *res.Content != name {
			t.Fatalf("/%s on the new owner holds %q", name, *res.Content)
		}
	}
}

// mountedOnOwner serves a fleet's only worker id on a store of its own,
// creates vault v on it and mounts v through the worker (mount.start).
// It returns the vault's caller and the mount's directory.
func mountedOnOwner(t *testing.T, f *fleet, id, v string, opts ...func(*worker.ServeOptions)) (call func(op messages.Op, args, out any) error, must func(error), dir string) {
	t.Helper()
	home := t.TempDir()
	st, err := vault.Open(context.Background(), filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	serveStore(t, f.conn(), id, home, st, nil, nil, opts...)
	f.waitMembers(id)
	call, must = vaultCaller(t, f.client(), v, 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	dir = t.TempDir()
	must(call(messages.OpMountStart, messages.MountArgs{Dir: dir, Machine: runner.MachineID()}, nil))
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return call, must, dir
}

// writeThrough writes name (its own name as content) in dir, a mount,
// and fsyncs it or only closes it.
func writeThrough(dir, name string, fsync bool) error {
	fh, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer fh.Close()
	if _, err := fh.Write([]byte(name)); err != nil {
		return err
	}
	if fsync {
		return fh.Sync()
	}
	return fh.Close()
}

// handOver moves vault v (namespace default) to worker to behind its
// owner's back, one epoch up, as a dispatcher does when the owner's
// heartbeat lapses.
func handOver(t *testing.T, f *fleet, v, to string) {
	t.Helper()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	kv, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	old, rev := ownerRecord(t, kv, "default", v)
	b, _ := json.Marshal(messages.Owner{Worker: to, Epoch: old.Epoch + 1})
	if _, err := kv.Update(ctx, "default."+v, b, rev); err != nil {
		t.Fatal(err)
	}
}

// headRevision is the revision of vault v's head (namespace default) in
// the fleet's heads bucket: it moves with every snapshot pushed.
func headRevision(t testing.TB, f *fleet, v string) uint64 {
	t.Helper()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	heads, err := js.KeyValue(ctx, messages.BucketHeads)
	if err != nil {
		t.Fatal(err)
	}
	e, err := heads.Get(ctx, messages.VaultKey("default", v))
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}
