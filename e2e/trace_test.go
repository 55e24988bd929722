package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// TestExecIsOneTraceAcrossTheFleet follows one exec request from the
// client through the dispatcher to the worker: one trace, the envelope
// and the audit events carry its id, and a later restore of the
// checkpoint the run saved links back to the span that saved it.
func TestExecIsOneTraceAcrossTheFleet(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	f := startFleet(t, withTracer(tp))
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "traced", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	env, err := c.Exec(ctx, "default", "traced", messages.ExecArgs{Shell: "echo hi > a.txt", Checkpoint: "always"})
	if err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusCompleted || env.Checkpoint == nil || env.TraceID == "" {
		t.Fatalf("envelope: status %s, checkpoint %v, trace_id %q; want completed, a checkpoint and a trace id", env.Status, env.Checkpoint, env.TraceID)
	}

	// One span of each name, all in the envelope's trace; handoff.push is
	// the snapshot that holds the exec's effects in the fleet before the
	// envelope is sent (replication at acknowledgement, decisions §30).
	names := []string{"send", "route", "process", "mount", "policy", "checkpoint.save", "exec", "changes", "handoff.push"}
	spans := waitForSpans(t, exp, func(s tracetest.SpanStub) bool { return s.SpanContext.TraceID().String() == env.TraceID }, names)
	if len(spans) != len(names) {
		t.Fatalf("trace %s has %d spans %v, want exactly %v", env.TraceID, len(spans), spanNames(spans), names)
	}
	by := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		by[s.Name] = s
	}
	if by["send"].Parent.IsValid() {
		t.Fatalf("send has parent %s, want it to be the root", by["send"].Parent.SpanID())
	}
	parent := map[string]string{"route": "send", "process": "route",
		"mount": "process", "policy": "process", "checkpoint.save": "process", "exec": "process", "changes": "process", "handoff.push": "process"}
	for child, p := range parent {
		if got, want := by[child].Parent.SpanID(), by[p].SpanContext.SpanID(); got != want {
			t.Errorf("%s: parent span %s, want %s (%s)", child, got, want, p)
		}
	}
	if k := by["send"].SpanKind; k != trace.SpanKindProducer {
		t.Errorf("send kind %v, want producer", k)
	}
	if k := by["process"].SpanKind; k != trace.SpanKindConsumer {
		t.Errorf("process kind %v, want consumer", k)
	}
	attrs := map[string]string{}
	for _, kv := range by["process"].Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["avfs.attempt"] != "1" || attrs["avfs.worker"] != "w1" || attrs["avfs.op"] != string(messages.OpExec) || attrs["avfs.vault"] != "traced" {
		t.Errorf("process attributes %v, want attempt 1, worker w1, op %s, vault traced", attrs, messages.OpExec)
	}

	// The audit events of the request, and the checkpoint it saved, carry
	// the trace id.
	var audit messages.AuditResult
	if err := c.Call(ctx, "default", "traced", messages.OpAudit, messages.AuditArgs{}, &audit); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range audit.Events {
		mine := e.RequestID == env.RequestID || (e.Action == "checkpoint.save" && e.Details["checkpoint"] == *env.Checkpoint)
		if !mine {
			continue
		}
		seen[e.Action] = true
		if e.TraceID != env.TraceID {
			t.Errorf("audit %s: trace_id %q, want %q", e.Action, e.TraceID, env.TraceID)
		}
	}
	if !seen["exec.run"] || !seen["checkpoint.save"] {
		t.Errorf("audit events of the request: %v, want exec.run and checkpoint.save", seen)
	}

	// Restoring the checkpoint links to the span that saved it.
	if err := c.Call(ctx, "default", "traced", messages.OpCheckpointRestore, messages.CheckpointArgs{Name: *env.Checkpoint}, nil); err != nil {
		t.Fatal(err)
	}
	restore := waitForSpans(t, exp, func(s tracetest.SpanStub) bool { return s.Name == "checkpoint.restore" }, []string{"checkpoint.restore"})[0]
	saved := by["checkpoint.save"].SpanContext
	if len(restore.Links) != 1 || restore.Links[0].SpanContext.SpanID() != saved.SpanID() || restore.Links[0].SpanContext.TraceID() != saved.TraceID() {
		t.Fatalf("checkpoint.restore links %+v, want one link to %s/%s", restore.Links, saved.TraceID(), saved.SpanID())
	}
	if restore.SpanContext.TraceID() == saved.TraceID() {
		t.Errorf("checkpoint.restore is in the saving request's trace %s, want its own", saved.TraceID())
	}
}

// waitForSpans polls exp until the ended spans matching keep include one
// of each name, and returns the matching spans.
func waitForSpans(t testing.TB, exp *tracetest.InMemoryExporter, keep func(tracetest.SpanStub) bool, names []string) []tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	poll.Until(t, 30*time.Second, fmt.Sprintf("spans %v", names), func() (bool, error) {
		got = got[:0]
		have := map[string]bool{}
		for _, s := range exp.GetSpans() {
			if keep(s) {
				got = append(got, s)
				have[s.Name] = true
			}
		}
		all := true
		for _, n := range names {
			all = all && have[n]
		}
		return all, fmt.Errorf("got %v", spanNames(got))
	})
	return got
}

func spanNames(ss []tracetest.SpanStub) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}
