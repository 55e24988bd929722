package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// lastSeq is the last sequence number stream name has stored: it grows by
// one for every request that goes through it, even after a work queue
// removed the message.
func lastSeq(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// ownerRecord reads ns/vault's record in the owners bucket.
func ownerRecord(t testing.TB, kv jetstream.KeyValue, ns, vault string) (messages.Owner, uint64) {
	t.Helper()
	e, err := kv.Get(context.Background(), ns+"."+vault)
	if err != nil {
		t.Fatal(err)
	}
	var o messages.Owner
	if err := json.Unmarshal(e.Value(), &o); err != nil {
		t.Fatal(err)
	}
	return o, e.Revision()
}

func TestDirectPathAfterFirstReply(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	req, work := lastSeq(t, js, messages.StreamRequests), lastSeq(t, js, messages.StreamWork)
	for i := 0; i < 20; i++ {
		if err := c.Call(ctx, "default", "v", messages.OpWrite, messages.WriteArgs{Path: "/log", Content: []byte("x"), Append: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/log"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "xxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("content after 20 appends: got %q", *cat.Content)
	}
	if r, w := lastSeq(t, js, messages.StreamRequests), lastSeq(t, js, messages.StreamWork); r != req || w != work {
		t.Fatalf("after the first reply: intake seq %d → %d, work seq %d → %d, want no change (direct)", req, r, work, w)
	}

	// The reply names the worker and the owner epoch.
	body, _ := json.Marshal(messages.Request{Op: messages.OpStat, Namespace: "default", Vault: "v", RequestID: "stat-1", Args: json.RawMessage(`{"path":"/log"}`)})
	m, err := f.conn().Request(messages.DirectSubject("w1", "default", "v", messages.OpStat), body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w, e := m.Header.Get(messages.HeaderWorker), m.Header.Get(messages.HeaderOwnerEpoch); w != "w1" || e != "1" {
		t.Fatalf("reply headers: worker %q epoch %q, want w1 and 1", w, e)
	}

	// exec.run keeps the intake; a client with the direct path off uses
	// it for everything.
	if _, err := c.Exec(ctx, "default", "v", messages.ExecArgs{Shell: "true"}); err != nil {
		t.Fatal(err)
	}
	off := f.client()
	off.DisableDirect = true
	for i := 0; i < 2; i++ {
		if err := off.Call(ctx, "default", "v", messages.OpStat, messages.PathArgs{Path: "/log"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if w := lastSeq(t, js, messages.StreamWork); w != work+3 {
		t.Fatalf("work seq %d → %d, want +3 (one exec, two requests with the direct path off)", work, w)
	}
}

func TestDirectRefusedByFormerOwner(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	nc := f.conn()
	js, _ := jetstream.New(nc)
	call := func(op messages.Op, args, out any) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return c.Call(cctx, "default", "v", op, args, out)
	}
	if err := call(messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(messages.OpWrite, messages.WriteArgs{Path: "/a", Content: []byte("moved")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(messages.OpCheckpointSave, messages.CheckpointArgs{Name: "cp1"}, nil); err != nil {
		t.Fatal(err)
	}
	// Wait for the checkpoint's copy, which the new owner will pull.
	waitPushed(t, js, "default", "v", "cp1")

	// Reassign the vault as a dispatcher would (compare-and-set, epoch+1).
	kv, err := js.KeyValue(ctx, messages.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	old, rev := ownerRecord(t, kv, "default", "v")
	next := map[string]string{"w1": "w2", "w2": "w1"}[old.Worker]
	b, _ := json.Marshal(messages.Owner{Worker: next, Epoch: old.Epoch + 1})
	if _, err := kv.Update(ctx, "default.v", b, rev); err != nil {
		t.Fatal(err)
	}

	// The former owner refuses a direct request once its cache has the
	// change, and runs nothing.
	body, _ := json.Marshal(messages.Request{Op: messages.OpStat, Namespace: "default", Vault: "v", RequestID: "stale-1",
		Args: json.RawMessage(`{"path":"/a"}`)})
	poll.Until(t, 10*time.Second, "the former owner refuses direct requests", func() (bool, error) {
		m, err := nc.Request(messages.DirectSubject(old.Worker, "default", "v", messages.OpStat), body, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(messages.HeaderUseIntake); got != "not-owner" {
			return false, fmt.Errorf("former owner %s still serves direct requests: %s", old.Worker, m.Data)
		}
		var rep messages.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != messages.CodeUnavailable {
			t.Fatalf("refusal body %s (%v), want an UNAVAILABLE reply", m.Data, err)
		}
		return true, nil
	})

	// The client still has the former owner cached: it is told to use the
	// intake and gets the new owner's answer, transparently.
	work := lastSeq(t, js, messages.StreamWork)
	var cat messages.CatResult
	if err := call(messages.OpCat, messages.PathArgs{Path: "/a"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "moved" {
		t.Fatalf("cat after the move: got %q, want %q", *cat.Content, "moved")
	}
	if w := lastSeq(t, js, messages.StreamWork); w != work+1 {
		t.Fatalf("work seq %d → %d, want one request through the intake", work, w)
	}
	// The new owner's reply taught the client the new route.
	if err := call(messages.OpCat, messages.PathArgs{Path: "/a"}, &cat); err != nil {
		t.Fatal(err)
	}
	if w := lastSeq(t, js, messages.StreamWork); w != work+1 {
		t.Fatalf("work seq %d → %d after the fallback, want no change (direct to %s)", work, w, next)
	}
}

func TestDirectTimeoutRetryAppliesOnce(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	nc := f.conn()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	c.DirectTimeout = 300 * time.Millisecond
	// A command occupies the vault's queue, so direct requests wait
	// behind it past their timeout.
	execDone := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "default", "v", messages.ExecArgs{Shell: "sleep 3"})
		execDone <- err
	}()
	poll.Until(t, 30*time.Second, "the command running on w1", func() (bool, error) {
		n := f.runningExecs("w1")
		return n >= 1, fmt.Errorf("%d requests running", n)
	})
	appendReq := func(id, s string) messages.Request {
		args, _ := json.Marshal(messages.WriteArgs{Path: "/log", Content: []byte(s), Append: true})
		return messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: "v", RequestID: id, Args: args}
	}

	// r2: a direct request whose caller gave up (no deadline header, so
	// the worker runs it when its turn comes), retried through the intake
	// with the same id.
	body, _ := json.Marshal(appendReq("r2", "b"))
	msg := nats.NewMsg(messages.DirectSubject("w1", "default", "v", messages.OpWrite))
	msg.Data = body
	if _, err := nc.RequestMsg(msg, 200*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("direct r2 behind the command: %v, want a timeout", err)
	}
	off := f.client()
	off.DisableDirect = true
	r2 := make(chan error, 1)
	go func() {
		rep, err := off.Do(ctx, appendReq("r2", "b"))
		if err == nil && rep.Error != nil {
			err = rep.Error
		}
		r2 <- err
	}()

	// r1: the client's direct attempt times out, and it sends the same
	// request through the intake by itself.
	rep, err := c.Do(ctx, appendReq("r1", "a"))
	if err != nil || rep.Error != nil {
		t.Fatalf("r1 after a direct timeout: %v %v", err, rep.Error)
	}
	if err := <-r2; err != nil {
		t.Fatalf("r2 through the intake: %v", err)
	}
	if err := <-execDone; err != nil {
		t.Fatal(err)
	}

	// Each applied once; sent again (through the intake, then directly)
	// they change nothing.
	fresh := f.client()
	for i := 0; i < 2; i++ {
		for _, r := range []messages.Request{appendReq("r1", "a"), appendReq("r2", "b")} {
			if rep, err := fresh.Do(ctx, r); err != nil || rep.Error != nil {
				t.Fatalf("resend %s: %v %v", r.RequestID, err, rep.Error)
			}
		}
	}
	var cat messages.CatResult
	if err := fresh.Call(ctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/log"}, &cat); err != nil {
		t.Fatal(err)
	}
	// r2's direct copy ran first; r1's direct copy was past its deadline.
	if *cat.Content != "ba" {
		t.Fatalf("content: got %q, want %q (each request once)", *cat.Content, "ba")
	}
}
