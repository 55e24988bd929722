package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/vault"
	"github.com/avfs/avfs/worker"
)

// agentUser may publish requests, to the intake or directly to a worker,
// only in its namespace, use only its namespace's transfer bucket, and
// read only its own inboxes: the permissions
// docs/nats-permissions.example.conf shows.
func agentUser(ns string) *server.User {
	return &server.User{Username: "agent-" + ns, Password: "pw-" + ns, Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: append([]string{messages.SubjectRequest + "." + ns + ".>",
			messages.SubjectDirect + ".*." + ns + ".>"}, transferPublish(ns)...)},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_" + ns + ".>"}},
	}}
}

// confined is a fleet behind a nats-server with permissions: user
// "fleet" with every right, one agentUser per namespace, a dispatcher and
// a worker "w" (store st under home) connected as fleet.
type confined struct {
	t    *testing.T
	ns   *server.Server
	js   jetstream.JetStream // the fleet's
	home string
	st   *vault.Store
}

// startConfined runs a confined fleet with agents for namespaces until
// the test ends.
func startConfined(t *testing.T, namespaces ...string) *confined {
	t.Helper()
	users := []*server.User{{Username: "fleet", Password: "fleet"}}
	for _, n := range namespaces {
		users = append(users, agentUser(n))
	}
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Users: users,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	c := &confined{t: t, ns: ns, home: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	fleetConn := c.connect("fleet", "fleet", "")
	c.js, _ = jetstream.New(fleetConn)
	if err := embedded.Setup(ctx, c.js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, fleetConn, dispatcher.Options{ID: "d"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := worker.Open(ctx, c.connect("fleet", "fleet", ""), worker.Options{Node: node.Options{Config: &config.Config{Home: c.home}}, Serve: worker.ServeOptions{ID: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	c.st = m.Node().Store()
	done := make(chan struct{}, 2)
	go func() { d.Run(ctx); done <- struct{}{} }()
	go func() { m.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; m.Close() })
	return c
}

// connect opens a connection as user, with inbox prefix inbox if given.
func (c *confined) connect(user, pw, inbox string) *nats.Conn {
	c.t.Helper()
	opts := []nats.Option{nats.UserInfo(user, pw)}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(c.ns.ClientURL(), opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

func TestNamespaceConfinement(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("needs /dev/fuse: %v", err)
	}
	cf := startConfined(t, "a", "b")
	connect, js := cf.connect, cf.js

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
