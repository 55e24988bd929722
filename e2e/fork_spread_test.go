package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// handoffChunks reads a worker's avfs.handoff.chunks counter by direction.
func handoffChunks(t *testing.T, r *sdkmetric.ManualReader) (sent, fetched int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "avfs.handoff.chunks" || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				switch v, _ := p.Attributes.Value("direction"); v {
				case attribute.StringValue("sent"):
					sent += p.Value
				case attribute.StringValue("fetched"):
					fetched += p.Value
				}
			}
		}
	}
	return sent, fetched
}

// waitPushed waits until the head of ns/vault says it was pushed for
// checkpoint cp, and returns it.
func waitPushed(t *testing.T, js jetstream.JetStream, ns, vault, cp string) messages.Head {
	t.Helper()
	ctx := context.Background()
	heads, err := js.KeyValue(ctx, messages.BucketHeads)
	if err != nil {
		t.Fatal(err)
	}
	var hd messages.Head
	poll.Until(t, 30*time.Second, fmt.Sprintf("%s/%s pushed for checkpoint %s", ns, vault, cp), func() (bool, error) {
		e, err := heads.Get(ctx, messages.VaultKey(ns, vault))
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(e.Value(), &hd); err != nil {
			return false, err
		}
		return hd.Checkpoint == cp, fmt.Errorf("head at checkpoint %q", hd.Checkpoint)
	})
	return hd
}

// TestForkOnAnotherWorkerMovesOnlyMissingChunks spreads forks of a vault
// over two workers with separate stores: a fork that lands on the other
// worker is served there with the source's content, the content crosses
// once however many forks follow, and a change made there sends only its
// own chunk back. A request for the fork sent to the source's worker,
// which keeps an outdated copy, is served by the fork's owner.
func TestForkOnAnotherWorkerMovesOnlyMissingChunks(t *testing.T) {
	f := startFleet(t)
	readers := map[string]*sdkmetric.ManualReader{}
	for _, id := range []string{"w1", "w2"} {
		readers[id] = sdkmetric.NewManualReader()
		f.addWorker(id, sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[id])))
	}
	c := f.client()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 1<<20) // 16 chunks of 64 KiB
	rand.Read(big)
	must(c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(c.Call(ctx, "default", "base", messages.OpWrite, messages.WriteArgs{Path: "/big.bin", Content: big}, nil))
	must(c.Call(ctx, "default", "base", messages.OpWrite, messages.WriteArgs{Path: "/small.txt", Content: []byte("small")}, nil))
	must(c.Call(ctx, "default", "base", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "c1"}, nil))
	var info messages.VaultResult
	must(c.Call(ctx, "default", "base", messages.OpVaultInfo, nil, &info))
	src := info.Vault.Worker
	other := map[string]string{"w1": "w2", "w2": "w1"}[src]
	waitPushed(t, js, "default", "base", "c1")
	if sent, _ := handoffChunks(t, readers[src]); sent != 17 {
		t.Fatalf("%s sent %d chunks for base, want 17", src, sent)
	}

	// Spread forks until two land on the other worker; placement hashes
	// the name among equally loaded workers, so this is deterministic.
	var away []string
	for i := 0; len(away) < 2; i++ {
		if i == 16 {
			t.Fatalf("16 spread forks, %d on %s", len(away), other)
		}
		name := fmt.Sprintf("try%02d", i)
		var fr messages.ForkResult
		must(c.Call(ctx, "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: name, Checkpoint: "c1", Placement: messages.PlacementSpread}, &fr))
		if fr.Vault.Worker == other {
			away = append(away, name)
		}
	}
	for i, name := range away {
		var cat messages.CatResult
		must(c.Call(ctx, "default", name, messages.OpCat, messages.PathArgs{Path: "/big.bin"}, &cat))
		if cat.ContentBase64 == nil {
			t.Fatalf("fork %s: /big.bin came back as text", name)
		}
		if got, err := base64.StdEncoding.DecodeString(*cat.ContentBase64); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("fork %s on %s: /big.bin differs from its source", name, other)
		}
		var vi messages.VaultResult
		must(c.Call(ctx, "default", name, messages.OpVaultInfo, nil, &vi))
		if vi.Vault.Worker != other {
			t.Fatalf("fork %s served by %s, want %s", name, vi.Vault.Worker, other)
		}
		if _, fetched := handoffChunks(t, readers[other]); fetched != 17 {
			t.Fatalf("after fork %d on %s: %d chunks fetched, want 17 (the first fork fetches all, later ones none)", i+1, other, fetched)
		}
	}
	if sent, _ := handoffChunks(t, readers[src]); sent != 17 {
		t.Fatalf("%s sent %d chunks after the forks, want still 17", src, sent)
	}

	// A change on the other worker sends one chunk.
	name := away[0]
	must(c.Call(ctx, "default", name, messages.OpWrite, messages.WriteArgs{Path: "/new.txt", Content: []byte("made on " + other)}, nil))
	must(c.Call(ctx, "default", name, messages.OpCheckpointSave, messages.CheckpointArgs{Name: "c2"}, nil))
	waitPushed(t, js, "default", name, "c2")
	if sent, _ := handoffChunks(t, readers[other]); sent != 1 {
		t.Fatalf("%s sent %d chunks for one new file, want 1", other, sent)
	}

	// The source's worker keeps a copy of the fork. A write it gets for
	// the fork (say from a dispatcher whose view lagged) must reach the
	// fork's owner, not that copy.
	rep := f.askWorker(src, "default", name, messages.OpWrite, messages.WriteArgs{Path: "/via-source.txt", Content: []byte("fenced")})
	if rep.Error != nil {
		t.Fatalf("write to %s sent to %s: %v", name, src, rep.Error)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", name, messages.OpCat, messages.PathArgs{Path: "/via-source.txt"}, &cat); err != nil || *cat.Content != "fenced" {
		t.Fatalf("a write sent to the fork's former worker did not reach its owner: %v", err)
	}
}

// TestParallelAttemptsSpreadAcrossWorkers runs 16 attempts of one base
// through the Go client on two workers with separate stores: the forks
// land on both, each attempt sees the base's files and reports its own
// change, and only the best attempt's fork is kept.
func TestParallelAttemptsSpreadAcrossWorkers(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "default", "base", messages.OpWrite, messages.WriteArgs{Path: "/src.txt", Content: []byte("from base")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "default", "base", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "ready"}, nil); err != nil {
		t.Fatal(err)
	}
	var cmds []messages.ExecArgs
	for i := range 16 {
		cmds = append(cmds, messages.ExecArgs{Shell: fmt.Sprintf("cat src.txt; echo %d > out.txt", i)})
	}
	res, err := c.RunAttempts(ctx, "default", client.Attempts{From: "base", Checkpoint: "ready", Commands: cmds, Keep: "best"})
	if err != nil {
		t.Fatal(err)
	}
	byWorker := map[string]int{}
	for i, at := range res.Attempts {
		e := at.Envelope
		if at.Error != nil || e == nil {
			t.Fatalf("attempt %d: %v", i, at.Error)
		}
		if e.Status != messages.StatusCompleted || e.Stdout != "from base" || len(e.Changes.Added) != 1 || e.Changes.Added[0].Path != "/out.txt" {
			t.Fatalf("attempt %d: %+v", i, e)
		}
		if at.Fork.Vault.Worker != e.Worker {
			t.Fatalf("attempt %d: forked onto %s, ran on %s", i, at.Fork.Vault.Worker, e.Worker)
		}
		byWorker[e.Worker]++
	}
	if len(byWorker) != 2 {
		t.Fatalf("16 attempts all ran on %v", byWorker)
	}
	if res.Best == nil || len(res.Kept) != 1 || res.Kept[0] != *res.Best {
		t.Fatalf("best %v, kept %v", res.Best, res.Kept)
	}
	for _, at := range res.Attempts {
		err := c.Call(ctx, "default", at.Vault, messages.OpVaultInfo, nil, nil)
		var e *messages.Error
		if kept := at.Vault == *res.Best; kept != (err == nil) || (!kept && (!errors.As(err, &e) || e.Code != messages.CodeVaultNotFound)) {
			t.Fatalf("%s (kept %v) after the run: %v", at.Vault, kept, err)
		}
	}
}

// TestForkTargetNamesAreReusable forks onto names that have an owner
// record but no vault: one only probed (a vault.info answered NOT_FOUND
// places it), one forked onto another worker and deleted. Both forks
// succeed; a fork onto a name that holds a vault is refused.
func TestForkTargetNamesAreReusable(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	must(c.Call(ctx, "default", "base", messages.OpWrite, messages.WriteArgs{Path: "/a", Content: []byte("a")}, nil))
	fork := func(target string) error {
		return c.Call(ctx, "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: target, Placement: messages.PlacementSpread}, nil)
	}
	var e *messages.Error
	for i := range 6 {
		name := fmt.Sprintf("probed%d", i)
		if err := c.Call(ctx, "default", name, messages.OpVaultInfo, nil, nil); !errors.As(err, &e) || e.Code != messages.CodeVaultNotFound {
			t.Fatalf("probe %s: %v", name, err)
		}
		must(fork(name))
		must(c.Call(ctx, "default", name, messages.OpVaultDelete, nil, nil))
		must(fork(name))
		var cat messages.CatResult
		must(c.Call(ctx, "default", name, messages.OpCat, messages.PathArgs{Path: "/a"}, &cat))
	}
	must(c.Call(ctx, "default", "taken", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	if err := fork("taken"); !errors.As(err, &e) || e.Code != messages.CodeVaultExists {
		t.Fatalf("fork onto an existing vault: %v, want VAULT_EXISTS", err)
	}
}

// TestForkOnAnotherWorkerIsTraced: the handover of a fork placed on
// another worker shows in the fork's trace: the push under the source
// worker's process span, and the pull on the fork's worker under the
// warm-up request the source sends it.
func TestForkOnAnotherWorkerIsTraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	f := startFleet(t, withTracer(tp))
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	var info messages.VaultResult
	if err := c.Call(ctx, "default", "base", messages.OpVaultInfo, nil, &info); err != nil {
		t.Fatal(err)
	}
	var away string
	for i := 0; away == ""; i++ {
		if i == 16 {
			t.Fatal("16 spread forks, none on the other worker")
		}
		name := fmt.Sprintf("t%02d", i)
		var fr messages.ForkResult
		if err := c.Call(ctx, "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: name, Placement: messages.PlacementSpread}, &fr); err != nil {
			t.Fatal(err)
		}
		if fr.Vault.Worker != info.Vault.Worker {
			away = name
		}
	}
	if err := c.Call(ctx, "default", away, messages.OpLs, messages.LsArgs{Path: "/"}, nil); err != nil {
		t.Fatal(err)
	}
	pushes := waitForSpans(t, exp, func(s tracetest.SpanStub) bool {
		return s.Name == "handoff.push" && attr(s, "avfs.vault") == away && attr(s, "avfs.seed") == "true"
	}, []string{"handoff.push"})
	pulls := waitForSpans(t, exp, func(s tracetest.SpanStub) bool {
		return s.Name == "handoff.pull" && attr(s, "avfs.vault") == away
	}, []string{"handoff.pull"})
	parentName := func(s tracetest.SpanStub) string {
		for _, p := range exp.GetSpans() {
			if p.SpanContext.SpanID() == s.Parent.SpanID() {
				return p.Name + "@" + attr(p, "avfs.op")
			}
		}
		return "?"
	}
	if got := parentName(pushes[0]); got != "process@vault.fork" {
		t.Errorf("the fork's push is under %s, want the fork's process span", got)
	}
	if got := parentName(pulls[0]); got != "process@vault.info" {
		t.Errorf("the pull is under %s, want the warm-up's process span", got)
	}
	if pulls[0].SpanContext.TraceID() != pushes[0].SpanContext.TraceID() {
		t.Errorf("the pull is in trace %s, the fork's push in %s: want one trace", pulls[0].SpanContext.TraceID(), pushes[0].SpanContext.TraceID())
	}
}
