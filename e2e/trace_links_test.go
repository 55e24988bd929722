package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/worker"
)

// TestRedeliveryAndReplayAreLinked forces a second delivery of an exec
// (no progress heartbeats, 1 s AckWait, 2 deliveries): both process spans
// are in the request's trace, under its one route span, and the second
// links to the first. The request is then dead-lettered and replayed: the
// replay is a new trace whose dlq.replay root links to the original.
func TestRedeliveryAndReplayAreLinked(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	f := startFleet(t, withTracer(tp))
	home := t.TempDir()
	ctx := context.Background()
	h := openNode(t, nodeOptions(home, "w1", nil, tp, nil))
	stopFaulty := f.runServer(h, worker.ServeOptions{ID: "w1", AckWait: time.Second, MaxDeliver: 2, Wrap: worker.NoProgress, Tracer: tp})
	f.waitMembers("w1")
	c := f.client()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := c.Exec(cctx, "default", "v", messages.ExecArgs{Shell: "sleep 3; echo done >> done.txt", Timeout: "60s"})
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeUnavailable {
		t.Fatalf("exec that ran out of deliveries: got %v, want UNAVAILABLE", err)
	}

	send := waitForSpans(t, exp, func(s tracetest.SpanStub) bool {
		return s.Name == "send" && attr(s, "avfs.op") == string(messages.OpExec)
	}, []string{"send"})[0]
	orig := send.SpanContext.TraceID()
	deadline := time.Now().Add(15 * time.Second)
	var procs, routes []tracetest.SpanStub
	poll.For(time.Until(deadline), "two process spans", func() (bool, error) {
		procs, routes = nil, nil
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() != orig {
				continue
			}
			switch s.Name {
			case "process":
				procs = append(procs, s)
			case "route":
				routes = append(routes, s)
			}
		}
		return len(procs) >= 2, nil
	}) // (the counts are checked below, with what they are)
	if len(procs) != 2 || len(routes) != 1 {
		t.Fatalf("trace %s: %d process and %d route spans, want 2 and 1", orig, len(procs), len(routes))
	}
	by := map[string]tracetest.SpanStub{}
	for _, p := range procs {
		by[attr(p, "avfs.attempt")] = p
		if p.Parent.SpanID() != routes[0].SpanContext.SpanID() {
			t.Errorf("process attempt %s: parent %s, want the route span %s", attr(p, "avfs.attempt"), p.Parent.SpanID(), routes[0].SpanContext.SpanID())
		}
	}
	first, second := by["1"], by["2"]
	if len(first.Links) != 0 {
		t.Errorf("first attempt links %+v, want none", first.Links)
	}
	if len(second.Links) != 1 || second.Links[0].SpanContext.SpanID() != first.SpanContext.SpanID() || second.Links[0].SpanContext.TraceID() != orig {
		t.Fatalf("second attempt links %+v, want one link to the first attempt %s", second.Links, first.SpanContext.SpanID())
	}

	// Replay the dead letter with a healthy worker: a new trace, linked
	// to the original.
	js, _ := jetstream.New(f.conn())
	list, err := dispatcher.DeadLetters(ctx, js)
	if err != nil || len(list.Dead) != 1 {
		t.Fatalf("dead letters %+v (%v), want one", list, err)
	}
	if err := stopFaulty(); err != nil {
		t.Fatal(err)
	}
	f.runServer(h, worker.ServeOptions{ID: "w1", Tracer: tp})
	if _, err := dispatcher.Replay(ctx, js, tp, list.Dead[0].Seq); err != nil {
		t.Fatal(err)
	}
	replay := waitForSpans(t, exp, func(s tracetest.SpanStub) bool { return s.Name == "dlq.replay" }, []string{"dlq.replay"})[0]
	if replay.Parent.IsValid() || replay.SpanContext.TraceID() == orig {
		t.Fatalf("dlq.replay: parent %v, trace %s; want a root span in a new trace", replay.Parent, replay.SpanContext.TraceID())
	}
	if len(replay.Links) != 1 || replay.Links[0].SpanContext.TraceID() != orig {
		t.Fatalf("dlq.replay links %+v, want one link into the original trace %s", replay.Links, orig)
	}
	newTrace := replay.SpanContext.TraceID()
	spans := waitForSpans(t, exp, func(s tracetest.SpanStub) bool { return s.SpanContext.TraceID() == newTrace }, []string{"dlq.replay", "route", "process"})
	for _, s := range spans {
		if s.Name == "route" && s.Parent.SpanID() != replay.SpanContext.SpanID() {
			t.Errorf("replayed route: parent %s, want dlq.replay %s", s.Parent.SpanID(), replay.SpanContext.SpanID())
		}
	}
}

// TestAttemptExecLinksToItsFork: an attempt's exec send span links to
// the send span of the fork it runs in, as `avfs attempts run` sends them
// (the fork's span context recorded with telemetry.RecordSpan, the link
// passed with telemetry.WithLinks), both under one attempts.run span.
func TestAttemptExecLinksToItsFork(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	f := startFleet(t, withTracer(tp))
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, run := tp.Tracer("test").Start(ctx, "attempts.run")
	var fork trace.SpanContext
	if err := c.Call(telemetry.RecordSpan(ctx, &fork), "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: "base-attempt-01"}, nil); err != nil {
		t.Fatal(err)
	}
	if !fork.IsValid() {
		t.Fatal("the fork's send span context was not recorded")
	}
	env, err := c.Exec(telemetry.WithLinks(ctx, trace.Link{SpanContext: fork}), "default", "base-attempt-01", messages.ExecArgs{Shell: "true"})
	if err != nil {
		t.Fatal(err)
	}
	run.End()
	sends := waitForSpans(t, exp, func(s tracetest.SpanStub) bool {
		return s.Name == "send" && s.SpanContext.TraceID() == run.SpanContext().TraceID()
	}, []string{"send"})
	var execSend, forkSend *tracetest.SpanStub
	for i, s := range sends {
		if s.Parent.SpanID() != run.SpanContext().SpanID() {
			t.Errorf("send %s: parent %s, want attempts.run", attr(s, "avfs.op"), s.Parent.SpanID())
		}
		switch attr(s, "avfs.op") {
		case string(messages.OpExec):
			execSend = &sends[i]
		case string(messages.OpVaultFork):
			forkSend = &sends[i]
		}
	}
	if execSend == nil || forkSend == nil || forkSend.SpanContext.SpanID() != fork.SpanID() {
		t.Fatalf("send spans %v: want the fork's (recorded as %s) and the exec's", spanNames(sends), fork.SpanID())
	}
	if len(execSend.Links) != 1 || execSend.Links[0].SpanContext.SpanID() != fork.SpanID() {
		t.Fatalf("exec send links %+v, want one link to the fork's send span %s", execSend.Links, fork.SpanID())
	}
	if len(forkSend.Links) != 0 {
		t.Errorf("fork send links %+v, want none", forkSend.Links)
	}
	// The links stop at the send span: the exec's route span has none.
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == env.TraceID && s.Name == "route" && len(s.Links) != 0 {
			t.Errorf("route links %+v, want none", s.Links)
		}
	}
}

// attr is span s's attribute key as text ("" when absent).
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}
