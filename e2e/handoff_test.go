package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// TestHandoffAcrossMachines kills a vault's worker for real; the
// survivor has its own home (another machine, as far as stores go), so
// it serves the vault from the copy pushed to the object store at the
// last checkpoint plus the change log after it: what was acknowledged
// after that checkpoint is kept too.
func TestHandoffAcrossMachines(t *testing.T) {
	start := time.Now()
	f := startFleet(t)
	home1 := t.TempDir()
	w1 := f.startWorkerProcess(home1, "m1")
	f.waitMembers("m1")
	c := f.client()
	call, must := vaultCaller(t, c, "hv", 60*time.Second)
	must(call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("before")}, nil))
	must(call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "cp1"}, nil))

	// The push is asynchronous: wait until the checkpoint's copy is the
	// vault's head before changing the vault again.
	js, _ := jetstream.New(f.conn())
	if hd := waitPushed(t, js, "default", "hv", "cp1"); hd.Epoch != 1 || hd.Worker != "m1" {
		t.Fatalf("pushed head %+v, want epoch 1 by m1", hd)
	}
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/b.txt", Content: []byte("after")}, nil))

	w2 := f.startWorkerProcess(t.TempDir(), "m2")
	f.waitMembers("m2")
	killed := time.Now()
	killWorker(t, w1)

	var cat messages.CatResult
	if err := call(messages.OpCat, messages.PathArgs{Path: "/a.txt"}, &cat); err != nil {
		t.Fatalf("the vault was not served after its worker died: %v", err)
	}
	t.Logf("served again %v after the kill", time.Since(killed).Round(time.Millisecond))
	if *cat.Content != "before" {
		t.Fatalf("checkpointed write lost: %q", *cat.Content)
	}
	// The write after the last push was acknowledged once the change log
	// held it: the new owner replays it (RPO 0).
	must(call(messages.OpCat, messages.PathArgs{Path: "/b.txt"}, &cat))
	if *cat.Content != "after" {
		t.Fatalf("a write acknowledged after the last push, after the failover: %q", *cat.Content)
	}
	var e *messages.Error
	var info messages.VaultResult
	must(call(messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != "m2" {
		t.Fatalf("vault served by %q, want m2", info.Vault.Worker)
	}
	// The vault works normally on its new worker.
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/c.txt", Content: []byte("new")}, nil))
	must(call(messages.OpCat, messages.PathArgs{Path: "/c.txt"}, &cat))
	if *cat.Content != "new" {
		t.Fatalf("write after failover: %q", *cat.Content)
	}
	var cps messages.CheckpointListResult
	must(call(messages.OpCheckpointList, nil, &cps))
	if len(cps.Checkpoints) == 0 || cps.Checkpoints[0].Name != "cp1" {
		t.Fatalf("checkpoints after failover: %+v", cps.Checkpoints)
	}
	var rr messages.RestoreResult
	must(call(messages.OpCheckpointRestore, messages.CheckpointArgs{Name: "cp1"}, &rr))
	if err := call(messages.OpCat, messages.PathArgs{Path: "/c.txt"}, &cat); !errors.As(err, &e) || e.Code != messages.CodeNotFound {
		t.Fatalf("restore after failover kept /c.txt: %v", err)
	}

	// m1 comes back with its home, whose copy of the vault is outdated
	// (it still has /b.txt). When m2 dies in turn, m1 must serve what m2
	// pushed, not its own copy.
	must(call(messages.OpWrite, messages.WriteArgs{Path: "/d.txt", Content: []byte("on m2")}, nil))
	must(call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "cp2"}, nil))
	if hd := waitPushed(t, js, "default", "hv", "cp2"); hd.Worker != "m2" || hd.Epoch != 2 {
		t.Fatalf("cp2 pushed as %+v, want worker m2 at epoch 2", hd)
	}
	f.startWorkerProcess(home1, "m1")
	f.waitMembers("m1")
	killWorker(t, w2)
	must(call(messages.OpCat, messages.PathArgs{Path: "/d.txt"}, &cat))
	if *cat.Content != "on m2" {
		t.Fatalf("/d.txt after m1 took the vault back: %q", *cat.Content)
	}
	if err := call(messages.OpCat, messages.PathArgs{Path: "/b.txt"}, &cat); !errors.As(err, &e) || e.Code != messages.CodeNotFound {
		t.Fatalf("m1 served its outdated copy (/b.txt still there, err %v)", err)
	}
	must(call(messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != "m1" {
		t.Fatalf("vault served by %q, want m1", info.Vault.Worker)
	}
	if took := time.Since(start); took > 90*time.Second {
		t.Fatalf("took %v", took)
	}
}

// TestGracefulStopHandsOverEverything stops a vault's worker with SIGTERM:
// it pushes what changed since the vault's last push and leaves the
// fleet, so a worker with its own store serves the vault next, with the
// writes acknowledged after its last checkpoint.
func TestGracefulStopHandsOverEverything(t *testing.T) {
	f := startFleet(t)
	w1 := f.startWorkerProcess(t.TempDir(), "g1")
	f.waitMembers("g1")
	c := f.client()
	ctx := context.Background()
	call := func(op messages.Op, args, out any) error {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return c.Call(cctx, "default", "gv", op, args, out)
	}
	if err := call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(messages.OpWrite, messages.WriteArgs{Path: "/late.txt", Content: []byte("not checkpointed")}, nil); err != nil {
		t.Fatal(err)
	}
	f.startWorkerProcess(t.TempDir(), "g2")
	f.waitMembers("g2")
	w1.Process.Signal(syscall.SIGTERM)
	if err := w1.Wait(); err != nil {
		t.Fatalf("g1 did not stop cleanly: %v", err)
	}
	var cat messages.CatResult
	if err := call(messages.OpCat, messages.PathArgs{Path: "/late.txt"}, &cat); err != nil || *cat.Content != "not checkpointed" {
		t.Fatalf("a write acknowledged before the graceful stop was lost: %v", err)
	}
	var info messages.VaultResult
	if err := call(messages.OpVaultInfo, nil, &info); err != nil || info.Vault.Worker != "g2" {
		t.Fatalf("vault served by %q (%v), want g2", info.Vault.Worker, err)
	}
}

// TestPausedWorkerComesBack pauses a vault's worker (SIGSTOP) long enough
// for the fleet to take it for dead and hand its vault to another worker
// on another machine, which changes it; then resumes it. The returning
// worker takes new work again, serves the vault no more while it is not
// the owner, and when the vault comes back to it (the other worker is
// killed), it serves the changes made elsewhere, also to a command in
// the mount it kept from before the pause.
func TestPausedWorkerComesBack(t *testing.T) {
	f := startFleet(t)
	p1 := f.startWorkerProcess(t.TempDir(), "p1")
	f.waitMembers("p1")
	c := f.client()
	ctx := context.Background()
	call := func(v string, op messages.Op, args, out any) error {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return c.Call(cctx, "default", v, op, args, out)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	catInMount := func(want string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		env, err := c.Exec(cctx, "default", "pv", messages.ExecArgs{Argv: []string{"cat", "a.txt"}})
		must(err)
		if env.Stdout != want {
			t.Fatalf("cat a.txt in the mount on %s: %q, want %q", env.Worker, env.Stdout, want)
		}
	}
	must(call("pv", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(call("pv", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("one")}, nil))
	catInMount("one") // p1 mounts the vault, and keeps the mount
	must(call("pv", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "c1"}, nil))
	js, _ := jetstream.New(f.conn())
	waitPushed(t, js, "default", "pv", "c1")

	p2 := f.startWorkerProcess(t.TempDir(), "p2")
	f.waitMembers("p2")
	p1.Process.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			p1.Process.Signal(syscall.SIGCONT)
		}
	}()
	must(call("pv", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("two")}, nil))
	var info messages.VaultResult
	must(call("pv", messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != "p2" {
		t.Fatalf("while p1 is paused the vault is served by %q, want p2", info.Vault.Worker)
	}
	must(call("pv", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "c2"}, nil))
	waitPushed(t, js, "default", "pv", "c2")

	p1.Process.Signal(syscall.SIGCONT)
	resumed = true
	// Back, p1 takes new work: a vault created now may land on it, and
	// every one is served.
	for i := range 4 {
		must(call(fmt.Sprintf("after%d", i), messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	}
	// A write sent to p1 for the vault it lost goes to p2.
	if rep := f.askWorker("p1", "default", "pv", messages.OpWrite, messages.WriteArgs{Path: "/b.txt", Content: []byte("via p1")}); rep.Error != nil {
		t.Fatalf("write sent to p1: %v", rep.Error)
	}
	must(call("pv", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "c3"}, nil))
	waitPushed(t, js, "default", "pv", "c3")

	killWorker(t, p2)
	catInMount("two")
	var cat messages.CatResult
	must(call("pv", messages.OpCat, messages.PathArgs{Path: "/b.txt"}, &cat))
	if *cat.Content != "via p1" {
		t.Fatalf("/b.txt: %q", *cat.Content)
	}
	must(call("pv", messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != "p1" {
		t.Fatalf("after p2 died the vault is served by %q, want p1", info.Vault.Worker)
	}
}

// TestChangeThatOutlivesItsOwnershipIsNotAcknowledged moves a vault to
// another worker (as a dispatcher does when the owner's heartbeat lapses)
// while a command runs in it: the command's success is not reported, since
// its effects stay in a store the new owner never reads; the caller is
// told to retry.
func TestChangeThatOutlivesItsOwnershipIsNotAcknowledged(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "mv", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(f.conn())
	kv, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	old, rev := ownerRecord(t, kv, "default", "mv")
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "default", "mv", messages.ExecArgs{Shell: "sleep 3; echo x > f"})
		done <- err
	}()
	// Moved once the exec runs there (its owner check is behind it).
	poll.Until(t, 30*time.Second, "the exec running on "+old.Worker, func() (bool, error) {
		n := f.runningExecs(old.Worker)
		return n >= 1, fmt.Errorf("%d requests running", n)
	})
	next := map[string]string{"w1": "w2", "w2": "w1"}[old.Worker]
	b, _ := json.Marshal(messages.Owner{Worker: next, Epoch: old.Epoch + 1})
	if _, err := kv.Update(ctx, "default.mv", b, rev); err != nil {
		t.Fatal(err)
	}
	var e *messages.Error
	if err := <-done; !errors.As(err, &e) || e.Code != messages.CodeUnavailable {
		t.Fatalf("exec that outlived its worker's ownership: %v, want UNAVAILABLE", err)
	}
}
