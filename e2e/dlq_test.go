package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/cli"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/worker"
)

// runServer runs a worker server for node n with o until the returned
// stop is called; stop waits for its in-flight requests and returns Run's
// error. n stays open: another server may serve it next.
func (f *fleet) runServer(n *node.Node, o worker.ServeOptions) (stop func() error) {
	f.t.Helper()
	srv, err := worker.NewServer(f.conn(), n, o)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-errc
		}
		return runErr
	}
	f.t.Cleanup(func() { stop() })
	return stop
}

// avfsCLI runs the avfs command line in-process against the fleet.
func (f *fleet) avfsCLI(args ...string) (string, int) {
	f.t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), append(args, "--nats", f.url, "--json"), strings.NewReader(""), &out, &errb, cli.Options{})
	if code != 0 {
		f.t.Logf("avfs %v: exit %d: %s%s", args, code, out.String(), errb.String())
	}
	return out.String(), code
}

func TestDeadLetterAndReplay(t *testing.T) {
	f := startFleet(t)
	t.Setenv("AVFS_HOME", t.TempDir())
	home := t.TempDir()
	ctx := context.Background()
	h := openNode(t, nodeOptions(home, "w1", nil, nil, nil))

	// A faulty worker: no progress heartbeats, so a 3 s command outlives
	// its 1 s AckWait on both of its 2 deliveries.
	stopFaulty := f.runServer(h, worker.ServeOptions{ID: "w1", AckWait: time.Second, MaxDeliver: 2, Wrap: worker.NoProgress})
	f.waitMembers("w1")
	c := f.client()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Exec(cctx, "default", "v", messages.ExecArgs{Shell: "sleep 3; echo done >> done.txt", Timeout: "60s"})
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeUnavailable || !strings.Contains(me.Message, "dead-lettered") {
		t.Fatalf("exec that ran out of deliveries: got %v, want an UNAVAILABLE dead-lettered reply", err)
	}
	t.Logf("dead-lettered after %v: %s", time.Since(start).Round(time.Millisecond), me.Message)

	out, code := f.avfsCLI("fleet", "dlq", "list")
	if code != 0 {
		t.Fatal("fleet dlq list failed")
	}
	var list messages.DeadLetters
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("dlq list output %q: %v", out, err)
	}
	if len(list.Dead) != 1 {
		t.Fatalf("dlq list = %+v, want one dead letter", list)
	}
	d := list.Dead[0]
	if d.Op != messages.OpExec || d.Namespace != "default" || d.Vault != "v" || d.Worker != "w1" || d.RequestID == "" ||
		!strings.Contains(d.Reason, "max deliveries (2) exceeded on worker w1") || d.Subject != messages.DLQSubject("default", "v", messages.OpExec) {
		t.Fatalf("dead letter = %+v", d)
	}
	js, _ := jetstream.New(f.conn())
	ws, err := js.Stream(ctx, messages.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ws.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("work stream still holds %d messages (%v), want the dead one deleted", info.State.Msgs, err)
	}

	// The caller gave up; listen on its inbox to see the replay's reply.
	ds, _ := js.Stream(ctx, messages.StreamDLQ)
	raw, err := ds.GetMsg(ctx, d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := f.conn().SubscribeSync(raw.Header.Get(messages.HeaderReplyTo))
	if err != nil {
		t.Fatal(err)
	}

	// Replace the faulty worker with a healthy one (it finishes what it
	// started first), then replay.
	if err := stopFaulty(); err != nil {
		t.Fatal(err)
	}
	f.runServer(h, worker.ServeOptions{ID: "w1"})
	out, code = f.avfsCLI("fleet", "dlq", "replay", strconv.FormatUint(d.Seq, 10))
	if code != 0 {
		t.Fatal("fleet dlq replay failed")
	}
	var rp messages.DLQReplayed
	if err := json.Unmarshal([]byte(out), &rp); err != nil || rp.Replayed != d.Seq || rp.RequestID != d.RequestID {
		t.Fatalf("dlq replay output %q (%v), want seq %d request %s", out, err, d.Seq, d.RequestID)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no reply to the replayed request: %v", err)
	}
	var rep messages.Reply
	var env messages.Envelope
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error != nil || json.Unmarshal(rep.Result, &env) != nil {
		t.Fatalf("replayed request's reply: %s", m.Data)
	}
	if rep.RequestID != d.RequestID || env.Status != messages.StatusCompleted {
		t.Fatalf("replayed request ended as %s (request %s), want completed %s", env.Status, rep.RequestID, d.RequestID)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/done.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "done\n" {
		t.Fatalf("done.txt = %q, want exactly one completed run", *cat.Content)
	}

	out, _ = f.avfsCLI("fleet", "dlq", "list")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Dead) != 0 {
		t.Fatalf("dlq list after replay = %q, want empty", out)
	}
	if _, code := f.avfsCLI("fleet", "dlq", "drop", strconv.FormatUint(d.Seq, 10)); code == 0 {
		t.Fatal("dropping a replayed dead letter succeeded, want NOT_FOUND")
	}
}

// TestDeadLetterUnplaced: a request no dispatcher can place (no live
// worker) is dead-lettered after 10 deliveries instead of dropped.
func TestDeadLetterUnplaced(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	c := f.client()
	cctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	err := c.Call(cctx, "default", "nowhere", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeUnavailable || !strings.Contains(me.Message, "dead-lettered") {
		t.Fatalf("unplaceable request: got %v, want an UNAVAILABLE dead-lettered reply", err)
	}
	js, _ := jetstream.New(f.conn())
	list, err := dispatcher.DeadLetters(ctx, js)
	if err != nil || len(list.Dead) != 1 {
		t.Fatalf("dead letters = %+v (%v), want one", list, err)
	}
	d := list.Dead[0]
	if d.Op != messages.OpVaultCreate || d.Vault != "nowhere" || d.Worker != "" || !strings.Contains(d.Reason, "no live workers") {
		t.Fatalf("dead letter = %+v", d)
	}
	if _, err := dispatcher.Drop(ctx, js, d.Seq); err != nil {
		t.Fatal(err)
	}
	if list, err := dispatcher.DeadLetters(ctx, js); err != nil || len(list.Dead) != 0 {
		t.Fatalf("dead letters after drop = %+v (%v)", list, err)
	}
}
