package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/embedded"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

// agentUser may publish requests, to the intake or directly to a worker,
// only in its namespace and read only its own inboxes: the permissions
// docs/nats-permissions.example.conf shows.
func agentUser(ns string) *server.User {
	return &server.User{Username: "agent-" + ns, Password: "pw-" + ns, Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{messages.SubjectRequest + "." + ns + ".>",
			messages.SubjectDirect + ".*." + ns + ".>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_" + ns + ".>"}},
	}}
}

func TestNamespaceConfinement(t *testing.T) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "fleet", Password: "fleet"}, agentUser("a"), agentUser("b")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	connect := func(user, pw, inbox string) *nats.Conn {
		t.Helper()
		opts := []nats.Option{nats.UserInfo(user, pw)}
		if inbox != "" {
			opts = append(opts, nats.CustomInboxPrefix(inbox))
		}
		nc, err := nats.Connect(ns.ClientURL(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}

	// The fleet side: a dispatcher and a worker with full rights.
	ctx, cancel := context.WithCancel(context.Background())
	fleetConn := connect("fleet", "fleet", "")
	js, _ := jetstream.New(fleetConn)
	if err := embedded.Setup(ctx, js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, fleetConn, dispatcher.Options{ID: "d"})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	st, err := vault.Open(ctx, filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := handler.New(st, handler.Options{Worker: "w"})
	cfg := &config.Config{Home: home}
	cleanup, err := worker.Wire(cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := worker.NewServer(connect("fleet", "fleet", ""), h, worker.ServeOptions{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { d.Run(ctx); done <- struct{}{} }()
	go func() { srv.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; cleanup(); st.Close() })
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("needs /dev/fuse: %v", err)
	}

	agentA, _ := client.New(connect("agent-a", "pw-a", "_INBOX_a"))
	agentB, _ := client.New(connect("agent-b", "pw-b", "_INBOX_b"))
	call := func(c *client.Client, ns, v string, op messages.Op, args, out any) error {
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		return c.Call(cctx, ns, v, op, args, out)
	}
	if err := call(agentA, "a", "secret", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(agentA, "a", "secret", messages.OpWrite, messages.WriteArgs{Path: "/plan.txt", Content: []byte("a's plan")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(agentB, "b", "mine", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatalf("b in its own namespace: %v", err)
	}
	// After its first reply, a's requests go directly to the worker, and
	// its permissions allow that.
	work := lastSeq(t, js, messages.StreamWork)
	if err := call(agentA, "a", "secret", messages.OpStat, messages.PathArgs{Path: "/plan.txt"}, nil); err != nil {
		t.Fatal(err)
	}
	if w := lastSeq(t, js, messages.StreamWork); w != work {
		t.Fatalf("a's stat: work seq %d → %d, want no change (direct)", work, w)
	}

	// Everything b tries in a's namespace is refused by the server itself.
	short := func(op messages.Op, args any) error {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		return agentB.Call(cctx, "a", "secret", op, args, nil)
	}
	for _, tc := range []struct {
		op   messages.Op
		args any
	}{
		{messages.OpCat, messages.PathArgs{Path: "/plan.txt"}},
		{messages.OpWrite, messages.WriteArgs{Path: "/plan.txt", Content: []byte("b was here")}},
		{messages.OpVaultFork, messages.VaultForkArgs{Target: "stolen"}},
		{messages.OpExec, messages.ExecArgs{Shell: "cat plan.txt"}},
	} {
		if err := short(tc.op, tc.args); !isCode(err, messages.CodePermissionDenied) {
			t.Errorf("b %s in namespace a: %v, want PERMISSION_DENIED (a refused publish)", tc.op, err)
		}
	}
	// Nor can b listen to a's replies.
	nb := connect("agent-b", "pw-b", "_INBOX_b")
	errs := make(chan error, 2)
	nb.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	nb.Subscribe("_INBOX_a.>", func(*nats.Msg) {})
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("subscribe to a's inboxes: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b subscribed to a's inboxes without a permission error")
	}

	// Nor send a direct request into namespace a: the server refuses the
	// publish, so the worker never sees it.
	body, _ := json.Marshal(messages.Request{Op: messages.OpWrite, Namespace: "a", Vault: "secret", RequestID: "b-direct",
		Args: json.RawMessage(`{"path":"/plan.txt","content":"YiB3YXMgaGVyZQ=="}`)})
	if _, err := nb.Request(messages.DirectSubject("w", "a", "secret", messages.OpWrite), body, 2*time.Second); err == nil {
		t.Fatal("b's direct request into namespace a was answered")
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("direct publish into namespace a: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b published a direct request into namespace a without a permission error")
	}

	var cat messages.CatResult
	if err := call(agentA, "a", "secret", messages.OpCat, messages.PathArgs{Path: "/plan.txt"}, &cat); err != nil {
		t.Fatal(err)
	}
	if *cat.Content != "a's plan" {
		t.Fatalf("a's vault changed: %q", *cat.Content)
	}
	var list messages.VaultListResult
	if err := call(agentA, "a", "", messages.OpVaultList, nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Vaults) != 1 {
		t.Fatalf("namespace a holds %d vaults, want 1 (no fork by b)", len(list.Vaults))
	}
}

// isCode reports whether err is a wire error with code c.
func isCode(err error, c messages.Code) bool {
	var e *messages.Error
	return errors.As(err, &e) && e.Code == c
}
