package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/worker"
)

// streamedAudit reads every message of the audit stream matching filter.
func streamedAudit(t *testing.T, js jetstream.JetStream, filter string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, messages.StreamAudit, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for {
		b, err := cons.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			out = append(out, m)
			n++
		}
		if n == 0 {
			return out
		}
	}
}

func TestAuditStreamExactlyOnceAcrossWorkerRestart(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	f := startFleet(t, withTracer(tp))
	ctx := context.Background()

	// A worker built by hand, so that it can be stopped and started again
	// on the same store under the same id.
	home := t.TempDir()
	n := openNode(t, nodeOptions(home, "w1", nil, tp, nil))
	start := func() (stop func()) {
		srv, err := worker.NewServer(f.conn(), n, worker.ServeOptions{ID: "w1", Tracer: tp, AuditPoll: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); srv.Run(wctx) }()
		stopped := false
		stop = func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
			}
		}
		t.Cleanup(stop)
		return stop
	}
	stop := start()
	f.waitMembers("w1")

	c := f.client()
	if err := c.Call(ctx, "ns1", "v1", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	traces := map[string]string{} // request id -> trace id of the request
	write := func(rid, p string) {
		t.Helper()
		sctx, span := tp.Tracer("test").Start(ctx, "agent")
		defer span.End()
		args, _ := json.Marshal(messages.WriteArgs{Path: p, Content: []byte("x")})
		rep, err := c.Do(sctx, messages.Request{Op: messages.OpWrite, Namespace: "ns1", Vault: "v1", RequestID: rid, Args: args})
		if err != nil || rep.Error != nil {
			t.Fatalf("write %s: %v %v", p, err, rep.Error)
		}
		traces[rid] = span.SpanContext().TraceID().String()
	}
	for i := range 3 {
		write(fmt.Sprintf("req-a%d", i), fmt.Sprintf("/a%d.txt", i))
	}

	// Down: an event recorded meanwhile (a local write on the same store)
	// is published after the restart, from the stored cursor.
	stop()
	args, _ := json.Marshal(messages.WriteArgs{Path: "/offline.txt", Content: []byte("y")})
	if rep := n.Handle(ctx, messages.Request{Op: messages.OpWrite, Namespace: "ns1", Vault: "v1", RequestID: "req-offline", Args: args}); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	stop = start()
	for i := range 2 {
		write(fmt.Sprintf("req-b%d", i), fmt.Sprintf("/b%d.txt", i))
	}

	// Down again, and the cursor lost: the new server publishes every
	// event again, and the stream keeps each once (Nats-Msg-Id).
	stop()
	if err := n.Store().SetMeta(ctx, worker.AuditCursorKey("w1"), "0"); err != nil {
		t.Fatal(err)
	}
	start()
	write("req-c0", "/c0.txt")

	var want messages.AuditResult
	if err := c.Call(ctx, "ns1", "v1", messages.OpAudit, messages.AuditArgs{Limit: 1000}, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Events) < 8 { // vault.create + 7 writes
		t.Fatalf("audit log: %d events: %+v", len(want.Events), want.Events)
	}
	js, _ := jetstream.New(f.conn())
	filter := messages.AuditFilterSubject("ns1", "v1", "")
	var got []jetstream.Msg
	poll.Until(t, 30*time.Second, "every logged event in the stream", func() (bool, error) {
		got = streamedAudit(t, js, filter)
		return len(got) >= len(want.Events), fmt.Errorf("%d of %d events", len(got), len(want.Events))
	})
	// (A duplicate could only be an event published twice under two
	// message ids: each event's id is checked below.)
	if len(got) != len(want.Events) {
		t.Fatalf("stream holds %d events, the vault's log %d", len(got), len(want.Events))
	}
	seenReq := map[string]int{}
	for i, m := range got {
		var e messages.AuditEvent
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatal(err)
		}
		w := want.Events[i]
		if e.ID != w.ID || e.Action != w.Action || e.Path != w.Path || e.RequestID != w.RequestID || e.TraceID != w.TraceID || e.Time != w.Time {
			t.Fatalf("event %d: streamed %+v, logged %+v", i, e, w)
		}
		if m.Subject() != messages.AuditSubject("ns1", "v1", e.Action) {
			t.Fatalf("event %d on %s", i, m.Subject())
		}
		tok := strings.Split(m.Subject(), ".")
		if len(tok) < 6 || tok[2] != "audit" || tok[3] != "ns1" || tok[4] != "v1" || strings.Join(tok[5:], ".") != e.Action {
			t.Fatalf("event %d: subject tokens %v", i, tok)
		}
		if id := m.Headers().Get(messages.HeaderMsgID); id != fmt.Sprintf("w1-%d", e.ID) {
			t.Fatalf("event %d: msg id %q", i, id)
		}
		if e.RequestID != "" {
			seenReq[e.RequestID]++
		}
		if tr, ok := traces[e.RequestID]; ok {
			if e.Action != string(messages.OpWrite) || e.TraceID != tr {
				t.Fatalf("event of %s: action %s trace %s, want file.write in trace %s", e.RequestID, e.Action, e.TraceID, tr)
			}
		}
	}
	for rid := range traces {
		if seenReq[rid] != 1 {
			t.Fatalf("request %s: %d events in the stream, want 1 (%v)", rid, seenReq[rid], seenReq)
		}
	}
	if seenReq["req-offline"] != 1 {
		t.Fatalf("the event written while the worker was down: %v", seenReq)
	}

	// Following: an ordered consumer on the vault's subjects sees a new
	// event as it happens, and an action filter narrows it.
	// Since now, rather than "new": the consumer may start after the
	// events below are stored; every earlier event is in the stream.
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	evs := make(chan messages.AuditEvent, 16)
	since := time.Now()
	go c.FollowAudit(fctx, "ns1", client.FollowOptions{Vault: "v1", Action: "file.", Since: since}, func(e messages.AuditEvent) error {
		evs <- e
		return nil
	})
	if err := c.Call(ctx, "ns1", "v1", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "cp1"}, nil); err != nil {
		t.Fatal(err)
	}
	write("req-d0", "/d0.txt")
	select {
	case e := <-evs:
		if e.RequestID != "req-d0" || e.Action != "file.write" || e.Path != "/d0.txt" {
			t.Fatalf("followed %+v", e)
		}
	case <-fctx.Done():
		t.Fatal("no followed event")
	}
}
