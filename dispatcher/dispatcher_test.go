package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// These tests drive one dispatcher against an embedded server. The
// workers are what the dispatcher sees of them, no more: heartbeats in
// avfs_members, consumers of the work stream, entries in the catalogs
// (written here as a worker writes them), so each decision is tested
// alone and in a few seconds.

// rig is an embedded server with the fleet's streams and buckets and one
// running dispatcher.
type rig struct {
	t       *testing.T
	nc      *nats.Conn
	js      jetstream.JetStream
	members jetstream.KeyValue
	owners  jetstream.KeyValue
	catalog jetstream.KeyValue
	aprs    jetstream.KeyValue
	ctx     context.Context
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ns, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := embedded.Setup(ctx, js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, nc: nc, js: js, ctx: ctx}
	for name, kv := range map[string]*jetstream.KeyValue{messages.BucketMembers: &r.members, messages.BucketOwners: &r.owners,
		messages.BucketCatalog: &r.catalog, messages.BucketApprovals: &r.aprs} {
		if *kv, err = js.KeyValue(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(ctx, nc, Options{ID: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// beat keeps worker heartbeats in avfs_members until stop is called (or
// the test ends): each id beats as an idle worker.
func (r *rig) beat(ids ...string) (stop func()) {
	r.t.Helper()
	put := func() {
		for _, id := range ids {
			b, _ := json.Marshal(messages.Member{ID: id, Kind: "worker", LastSeen: time.Now().UTC().Format(time.RFC3339Nano)})
			if _, err := r.members.Put(context.Background(), "worker."+id, b); err != nil {
				r.t.Errorf("heartbeat of %s: %v", id, err)
			}
		}
	}
	put()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				put()
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	r.t.Cleanup(stop)
	return stop
}

// send publishes a request to the intake and returns the inbox its reply
// comes to.
func (r *rig) send(ns, vault string, op messages.Op, rid string, args any) *nats.Subscription {
	r.t.Helper()
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { sub.Unsubscribe() })
	req := messages.Request{Op: op, Namespace: ns, Vault: vault, RequestID: rid}
	if args != nil {
		req.Args, _ = json.Marshal(args)
	}
	m := nats.NewMsg(messages.RequestSubject(ns, vault, op))
	m.Data, _ = json.Marshal(req)
	m.Header.Set(messages.HeaderReplyTo, inbox)
	m.Header.Set(messages.HeaderRequestID, rid)
	m.Header.Set(nats.MsgIdHdr, messages.IntakeMsgID(ns, vault, rid))
	if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
		r.t.Fatal(err)
	}
	return sub
}

// reply waits for the reply on sub.
func (r *rig) reply(sub *nats.Subscription) messages.Reply {
	r.t.Helper()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		r.t.Fatalf("no reply: %v", err)
	}
	var rep messages.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		r.t.Fatalf("reply %s: %v", m.Data, err)
	}
	return rep
}

// owner reads ns/vault's record in avfs_owners.
func (r *rig) owner(ns, vault string) (messages.Owner, error) {
	e, err := r.owners.Get(r.ctx, messages.VaultKey(ns, vault))
	if err != nil {
		return messages.Owner{}, err
	}
	var o messages.Owner
	return o, json.Unmarshal(e.Value(), &o)
}

// TestBurstOfNewVaultsIsSpread: heartbeats lag a burst of creates by
// seconds, so the dispatcher counts what it placed since; a burst over
// idle workers lands on all of them, none taking the lion's share.
func TestBurstOfNewVaultsIsSpread(t *testing.T) {
	r := newRig(t)
	r.beat("w1", "w2", "w3")
	const n = 12
	for i := range n {
		r.send("default", fmt.Sprintf("burst%02d", i), messages.OpVaultCreate, fmt.Sprintf("c%02d", i), messages.VaultCreateArgs{})
	}
	got := map[string]int{}
	poll.Until(t, 30*time.Second, "every vault of the burst placed", func() (bool, error) {
		clear(got)
		for i := range n {
			o, err := r.owner("default", fmt.Sprintf("burst%02d", i))
			if err != nil {
				return false, fmt.Errorf("burst%02d: %w", i, err)
			}
			got[o.Worker]++
		}
		return true, nil
	})
	for _, w := range []string{"w1", "w2", "w3"} {
		if got[w] < 2 || got[w] > 6 {
			t.Fatalf("placement of %d new vaults over 3 idle workers: %v, want each 2 to 6", n, got)
		}
	}
	// Each placement names the request that made it, epoch 1.
	if o, _ := r.owner("default", "burst00"); o.Epoch != 1 || o.Request != "c00" {
		t.Fatalf("owner of burst00: %+v, want epoch 1, request c00", o)
	}
}

// TestDeadWorkersVaultsAreRescued: a worker whose heartbeat is gone has
// its vaults handed to a live worker at a higher epoch, and the requests
// waiting in its consumer forwarded there under a new message id.
func TestDeadWorkersVaultsAreRescued(t *testing.T) {
	r := newRig(t)
	stopA := r.beat("wa")
	// wa alone is alive: the vault is placed on it.
	r.send("default", "v", messages.OpVaultCreate, "c1", messages.VaultCreateArgs{})
	poll.Until(t, 30*time.Second, "v placed", func() (bool, error) {
		o, err := r.owner("default", "v")
		return err == nil && o.Worker == "wa", err
	})
	// wa's consumer holds a request it never took.
	if _, err := r.js.CreateOrUpdateConsumer(r.ctx, messages.StreamWork, jetstream.ConsumerConfig{
		Durable: "worker-wa", FilterSubject: messages.SubjectWork + ".wa.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	toB, err := r.nc.SubscribeSync(messages.SubjectWork + ".wb.>")
	if err != nil {
		t.Fatal(err)
	}
	r.send("default", "v", messages.OpWrite, "w1", messages.WriteArgs{Path: "/a", Content: []byte("x")})
	st, err := r.js.Stream(r.ctx, messages.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the write forwarded to wa", func() (bool, error) {
		m, err := st.GetLastMsgForSubject(r.ctx, messages.WorkSubject("wa", "default", "v", messages.OpWrite))
		return err == nil && m.Header.Get(messages.HeaderRequestID) == "w1", err
	})

	// wa dies; wb lives.
	r.beat("wb")
	stopA()
	if err := r.members.Delete(r.ctx, "worker.wa"); err != nil {
		t.Fatal(err)
	}
	// Both requests wa never took (the create, then the write) move, in
	// order, each under a new message id.
	for _, want := range []struct {
		rid string
		op  messages.Op
	}{{"c1", messages.OpVaultCreate}, {"w1", messages.OpWrite}} {
		m, err := toB.NextMsg(45 * time.Second)
		if err != nil {
			t.Fatalf("wa's pending %s was not moved to wb: %v", want.rid, err)
		}
		if m.Subject != messages.WorkSubject("wb", "default", "v", want.op) || m.Header.Get(messages.HeaderRequestID) != want.rid {
			t.Fatalf("moved request: %s %v, want %s %s on wb", m.Subject, m.Header, want.op, want.rid)
		}
		if id := m.Header.Get(nats.MsgIdHdr); !strings.HasSuffix(id, ".from-wa") {
			t.Fatalf("moved request's message id %q: want a new one, marked from-wa", id)
		}
	}
	o, err := r.owner("default", "v")
	if err != nil || o.Worker != "wb" || o.Epoch != 2 {
		t.Fatalf("owner of v after wa died: %+v (%v), want wb at epoch 2", o, err)
	}
	// The dead worker's consumer is gone, so it gets nothing more.
	if _, err := r.js.Consumer(r.ctx, messages.StreamWork, "worker-wa"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("wa's consumer: %v, want it deleted", err)
	}
}

// TestUnplaceableRequestIsDeadLettered: with no live worker a request is
// tried again, and after 10 deliveries kept in the dead-letter stream, its
// caller told so; a request naming no valid vault is answered at once.
func TestUnplaceableRequestIsDeadLettered(t *testing.T) {
	r := newRig(t)
	bad := r.send("default", "-bad", messages.OpVaultCreate, "b1", nil)
	if rep := r.reply(bad); rep.Error == nil || rep.Error.Code != messages.CodeInvalidArgument {
		t.Fatalf("request for vault -bad: %+v, want %s at once", rep, messages.CodeInvalidArgument)
	}

	sub := r.send("default", "lost", messages.OpVaultCreate, "l1", messages.VaultCreateArgs{})
	m, err := sub.NextMsg(45 * time.Second) // 10 deliveries, a second apart
	if err != nil {
		t.Fatalf("no reply for a request no worker could take: %v", err)
	}
	var rep messages.Reply
	json.Unmarshal(m.Data, &rep)
	if rep.Error == nil || rep.Error.Code != messages.CodeUnavailable || !strings.Contains(rep.Error.Message, "dead-lettered") {
		t.Fatalf("reply: %s, want UNAVAILABLE: dead-lettered", m.Data)
	}
	dead, err := DeadLetters(r.ctx, r.js)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead.Dead) != 1 || dead.Dead[0].RequestID != "l1" || dead.Dead[0].Vault != "lost" || dead.Dead[0].Worker != "" {
		t.Fatalf("dead letters: %+v, want l1 for vault lost, placed nowhere", dead.Dead)
	}
	if _, err := r.owner("default", "lost"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("owner of a vault never placed: %v, want none", err)
	}
}

// TestRequestsOfAWorkerWithoutConsumerAreRescued: a request forwarded to
// a worker after its consumer was deleted (a routing decision made on a
// listing read just before its heartbeat expired) is moved to the vault's
// new owner like the ones its consumer held; before, it waited for a
// consumer that would never come.
func TestRequestsOfAWorkerWithoutConsumerAreRescued(t *testing.T) {
	r := newRig(t)
	b, _ := json.Marshal(messages.Owner{Worker: "gone", Epoch: 3})
	if _, err := r.owners.Create(r.ctx, messages.VaultKey("default", "v"), b); err != nil {
		t.Fatal(err)
	}
	toB, err := r.nc.SubscribeSync(messages.SubjectWork + ".wb.>")
	if err != nil {
		t.Fatal(err)
	}
	r.beat("wb")
	m := nats.NewMsg(messages.WorkSubject("gone", "default", "v", messages.OpWrite))
	m.Data, _ = json.Marshal(messages.Request{Op: messages.OpWrite, Namespace: "default", Vault: "v", RequestID: "late"})
	m.Header.Set(messages.HeaderRequestID, "late")
	m.Header.Set(nats.MsgIdHdr, messages.IntakeMsgID("default", "v", "late"))
	if _, err := r.js.PublishMsg(r.ctx, m); err != nil {
		t.Fatal(err)
	}
	got, err := toB.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the request waiting for a worker without consumer was not moved: %v", err)
	}
	if got.Subject != messages.WorkSubject("wb", "default", "v", messages.OpWrite) || got.Header.Get(messages.HeaderRequestID) != "late" {
		t.Fatalf("moved request: %s %v", got.Subject, got.Header)
	}
	if o, err := r.owner("default", "v"); err != nil || o.Worker != "wb" || o.Epoch != 4 {
		t.Fatalf("owner of v: %+v (%v), want wb at epoch 4", o, err)
	}
}
