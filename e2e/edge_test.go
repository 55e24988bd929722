package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/messages"
)

// TestRequestsThatCanNeverSucceedAreAnsweredAtOnce: bad names and fork
// targets are answered INVALID_ARGUMENT by the first process that sees
// them, delivered once, never dead-lettered. (They were retried ten times
// and parked in AVFS_DLQ as UNAVAILABLE.)
func TestRequestsThatCanNeverSucceedAreAnsweredAtOnce(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "team-a", "src", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(f.conn())
	for _, tc := range []struct {
		name      string
		ns, vault string
		op        messages.Op
		args      any
	}{
		{"vault token", "team-a", "b$v", messages.OpCat, messages.PathArgs{Path: "/f"}},
		{"namespace token", "a$b", "v", messages.OpStat, messages.PathArgs{Path: "/"}},
		{"create name", "team-a", "b$v", messages.OpVaultCreate, messages.VaultCreateArgs{}},
		{"fork target", "team-a", "src", messages.OpVaultFork, messages.VaultForkArgs{Target: "../x"}},
		{"fork target dot", "team-a", "src", messages.OpVaultFork, messages.VaultForkArgs{Target: "a.b"}},
	} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Call(cctx, tc.ns, tc.vault, tc.op, tc.args, nil)
		cancel()
		if !isCode(err, messages.CodeInvalidArgument) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT at once", tc.name, err)
		}
	}
	// Bad args and paths reach the worker and are answered there, once.
	for _, args := range []string{`{"path":"relative"}`, `{"path":"/a/../b"}`, `{"nope":1}`} {
		rep, err := c.Do(ctx, messages.Request{Op: messages.OpStat, Namespace: "team-a", Vault: "src", Args: json.RawMessage(args)})
		if err != nil || rep.Error == nil || (rep.Error.Code != messages.CodeInvalidPath && rep.Error.Code != messages.CodeInvalidArgument) {
			t.Errorf("stat %s: %v %+v, want INVALID_PATH or INVALID_ARGUMENT", args, err, rep.Error)
		}
	}
	if list, err := dispatcher.DeadLetters(ctx, js); err != nil || len(list.Dead) != 0 {
		t.Fatalf("dead letters = %+v (%v), want none", list, err)
	}
	for _, cons := range []struct{ stream, name string }{{messages.StreamRequests, "dispatch"}, {messages.StreamWork, "worker-w1"}} {
		ci, err := js.Consumer(ctx, cons.stream, cons.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ci.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumRedelivered != 0 || info.NumAckPending != 0 {
			t.Errorf("%s: %d redelivered, %d pending, want none", cons.name, info.NumRedelivered, info.NumAckPending)
		}
	}
	// The namespace is untouched: only src exists.
	var list messages.VaultListResult
	if err := c.Call(ctx, "team-a", "", messages.OpVaultList, nil, &list); err != nil || len(list.Vaults) != 1 {
		t.Fatalf("team-a after refused requests: %+v (%v)", list, err)
	}
}

// TestFleetStreamsAreBounded: the dead-letter stream has a size and an
// age limit, and a request larger than nats.max_request_bytes is refused
// at publish with INVALID_ARGUMENT, not kept.
func TestFleetStreamsAreBounded(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	st, err := js.Stream(ctx, messages.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxBytes != embedded.DefaultDLQMaxBytes || cfg.MaxAge != embedded.DefaultDLQMaxAge || cfg.MaxMsgSize != embedded.DefaultMaxRequestBytes || cfg.Discard != jetstream.DiscardOld {
		t.Fatalf("AVFS_DLQ limits: max_bytes %d, max_age %s, max_msg_size %d, discard %s", cfg.MaxBytes, cfg.MaxAge, cfg.MaxMsgSize, cfg.Discard)
	}
	// A smaller cap, as a deployment would configure it.
	if err := embedded.Setup(ctx, js, embedded.Topology{MaxRequestBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	c := f.client()
	c.DisableDirect = true
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	before := lastSeq(t, js, messages.StreamRequests)
	err = c.Call(ctx, "default", "v", messages.OpWrite, messages.WriteArgs{Path: "/big", Content: bytes.Repeat([]byte("x"), 100<<10)}, nil)
	if !isCode(err, messages.CodeInvalidArgument) {
		t.Fatalf("a request over the cap: %v, want INVALID_ARGUMENT", err)
	}
	if after := lastSeq(t, js, messages.StreamRequests); after != before {
		t.Fatalf("the intake kept a request over the cap (seq %d → %d)", before, after)
	}
	if err := c.Call(ctx, "default", "v", messages.OpWrite, messages.WriteArgs{Path: "/small", Content: bytes.Repeat([]byte("x"), 32<<10)}, nil); err != nil {
		t.Fatalf("a request under the cap: %v", err)
	}
}
