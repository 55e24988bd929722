package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/internal/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// confinedFleet runs nats-server with docs/nats-permissions.example.conf
// itself (passwords from the environment, as the file says), a dispatcher
// and a worker connected as the file's fleet users, and returns the
// server's URL.
func confinedFleet(t *testing.T) string {
	t.Helper()
	for k, v := range map[string]string{"AVFS_DISPATCHER_PASSWORD": "pw-d", "AVFS_WORKER_PASSWORD": "pw-w",
		"AGENT_TEAM_A_PASSWORD": "pw-a", "AGENT_TEAM_B_PASSWORD": "pw-b", "OPERATOR_TEAM_A_PASSWORD": "pw-op"} {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile("../docs/nats-permissions.example.conf")
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = "127.0.0.1", -1, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	connect := func(user, pw string) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pw))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx, cancel := context.WithCancel(context.Background())
	dnc := connect("avfs-dispatcher", "pw-d")
	js, _ := jetstream.New(dnc)
	if err := embedded.Setup(ctx, js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, dnc, dispatcher.Options{ID: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, connect("avfs-worker", "pw-w"), "w1", nil, nil)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, 30*time.Second, "worker w1 joined", func() (bool, error) {
		s, err := dispatcher.Status(ctx, js)
		return err == nil && len(s.Workers) == 1, err
	})
	return ns.ClientURL()
}

// tenant is a principal of the example permissions file, driving the
// real avfs binary (and, for what the CLI does not expose, such as
// choosing request ids, the Go client) with its own credentials.
type tenant struct {
	t              *testing.T
	url, ns        string
	user, pw, inbx string
	home           string
}

func newTenant(t *testing.T, url, ns, user, pw, inbox string) *tenant {
	return &tenant{t: t, url: url, ns: ns, user: user, pw: pw, inbx: inbox, home: t.TempDir()}
}

// cli runs `avfs ARGS --json` as the tenant and returns the JSON it
// printed and the exit status.
func (tn *tenant) cli(args ...string) (map[string]any, int) {
	tn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(tn.t), append(args, "--json")...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AVFS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "AVFS_HOME="+tn.home, "AVFS_NATS_URL="+tn.url, "AVFS_NATS_USER="+tn.user, "AVFS_NATS_PASSWORD="+tn.pw,
		"AVFS_NATS_INBOX_PREFIX="+tn.inbx, "AVFS_NAMESPACE="+tn.ns)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		tn.t.Fatalf("%s: avfs %v hung: %s", tn.user, args, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		tn.t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		tn.t.Fatalf("%s: avfs %v: stdout is not JSON (%v): %s %s", tn.user, args, err, out.String(), errb.String())
	}
	return doc, code
}

func (tn *tenant) ok(args ...string) map[string]any {
	tn.t.Helper()
	doc, code := tn.cli(args...)
	if code != 0 {
		tn.t.Fatalf("%s: avfs %v: exit %d: %v", tn.user, args, code, doc)
	}
	return doc
}

// refused asserts that avfs ARGS fails with code.
func (tn *tenant) refused(code messages.Code, args ...string) {
	tn.t.Helper()
	doc, exit := tn.cli(args...)
	e, _ := doc["error"].(map[string]any)
	if exit != 1 || e == nil || e["code"] != string(code) {
		tn.t.Errorf("%s: avfs %v: exit %d %v, want %s", tn.user, args, exit, doc, code)
	}
}

// client is the tenant's Go client, confined like its CLI.
func (tn *tenant) client() *client.Client {
	tn.t.Helper()
	nc, err := nats.Connect(tn.url, nats.UserInfo(tn.user, tn.pw), client.InboxPrefix(tn.inbx))
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		tn.t.Fatal(err)
	}
	c.Timeout = time.Minute
	return c
}

func (tn *tenant) do(c *client.Client, vaultName, id string, op messages.Op, args any) messages.Reply {
	tn.t.Helper()
	b, _ := json.Marshal(args)
	rep, err := c.Do(context.Background(), messages.Request{Op: op, Namespace: tn.ns, Vault: vaultName, RequestID: id, Args: b})
	if err != nil {
		tn.t.Fatalf("%s: %s: %v", tn.user, op, err)
	}
	return rep
}

// TestTenantsStayApart runs two agents and an operator under the example
// permissions, each as the real CLI with its own credentials, and tries
// everything team-a can send against team-b's data: each attempt fails
// with its code, and team-b's vault, files, results and approvals are
// exactly as before. docs/protocol.md ("What a tenant cannot do") lists
// what this proves.
func TestTenantsStayApart(t *testing.T) {
	url := confinedFleet(t)
	a := newTenant(t, url, "team-a", "agent-team-a", "pw-a", "_INBOX.team-a")
	b := newTenant(t, url, "team-b", "agent-team-b", "pw-b", "_INBOX.team-b")
	op := newTenant(t, url, "team-a", "operator-team-a", "pw-op", "_INBOX.operator-team-a")

	// team-b's data: a vault with a secret, an exec result under a request
	// id, and a command waiting for approval.
	b.ok("vault", "create", "secret")
	b.ok("--vault", "secret", "write", "/plan.txt", "b's secret")
	bc := b.client()
	if rep := b.do(bc, "secret", "job-1", messages.OpExec, messages.ExecArgs{Shell: "cat plan.txt"}); rep.Error != nil || !strings.Contains(string(rep.Result), "b's secret") {
		t.Fatalf("b's exec: %s %v", rep.Result, rep.Error)
	}
	held, _ := b.cli("--vault", "secret", "exec", "--", "curl", "http://example.invalid/")
	approvalID, _ := held["approval_id"].(string)
	if held["status"] != string(messages.StatusApprovalRequired) || approvalID == "" {
		t.Fatalf("b's held command: %v", held)
	}

	// The CLI works confined to its own namespace (nats.inbox_prefix).
	a.ok("vault", "create", "mine")
	a.ok("--vault", "mine", "write", "/notes.txt", "a's notes")
	if list := a.ok("vault", "list")["vaults"].([]any); len(list) != 1 {
		t.Fatalf("team-a lists %v, want only its vault", list)
	}

	// Another namespace: the server refuses the publish, at once.
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "vault", "list")
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "--vault", "secret", "cat", "/plan.txt")
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "--vault", "secret", "write", "/plan.txt", "pwned")
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "--vault", "secret", "exec", "--", "cat", "plan.txt")
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "vault", "fork", "secret", "stolen")
	a.refused(messages.CodePermissionDenied, "--namespace", "team-b", "approval", "list")
	// Its own namespace does not reach b's vault by name...
	a.refused(messages.CodeVaultNotFound, "--vault", "secret", "cat", "/plan.txt")
	a.refused(messages.CodeVaultNotFound, "vault", "fork", "secret", "stolen")
	// ...nor by a fork target or vault token that names a path.
	a.refused(messages.CodeInvalidArgument, "vault", "fork", "mine", "../team-b/secret")
	a.refused(messages.CodeInvalidArgument, "vault", "fork", "mine", "team-b.secret")
	a.refused(messages.CodeInvalidArgument, "--vault", "b$v", "cat", "/plan.txt")

	// Approvals: b's is not listed, not shown, and cannot be decided by
	// team-a's agent (its permissions deny decisions) or operator.
	if list := a.ok("approval", "list")["approvals"].([]any); len(list) != 0 {
		t.Fatalf("team-a sees approvals %v", list)
	}
	a.refused(messages.CodeApprovalNotFound, "approval", "show", approvalID)
	a.refused(messages.CodePermissionDenied, "approval", "grant", approvalID)
	op.refused(messages.CodeApprovalNotFound, "approval", "grant", approvalID)
	op.refused(messages.CodeApprovalNotFound, "approval", "deny", approvalID)
	op.refused(messages.CodeApprovalNotFound, "approval", "show", approvalID)

	// Request ids: b's id in a's vault is a's own request, never b's
	// result; the same id with other arguments is CONFLICT.
	ac := a.client()
	rep := a.do(ac, "mine", "job-1", messages.OpExec, messages.ExecArgs{Shell: "cat notes.txt"})
	if rep.Error != nil || strings.Contains(string(rep.Result), "b's secret") || !strings.Contains(string(rep.Result), "a's notes") {
		t.Fatalf("a's exec under b's request id: %s %v", rep.Result, rep.Error)
	}
	if rep := a.do(ac, "mine", "job-1", messages.OpExec, messages.ExecArgs{Shell: "cat /etc/hostname"}); rep.Error == nil || rep.Error.Code != messages.CodeConflict {
		t.Fatalf("a's request id reused with other args: %s %v, want CONFLICT", rep.Result, rep.Error)
	}
	if rep := a.do(ac, "mine", "job-1", messages.OpWrite, messages.WriteArgs{Path: "/x", Content: []byte("x")}); rep.Error == nil || rep.Error.Code != messages.CodeConflict {
		t.Fatalf("a's request id reused for another op: %v, want CONFLICT", rep.Error)
	}
	// A body that names b's vault under a's subject is refused by the
	// worker: subjects, which the server confines, are authoritative.
	nc, err := nats.Connect(url, nats.UserInfo(a.user, a.pw), client.InboxPrefix(a.inbx))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	spoof := nats.NewMsg(messages.RequestSubject("team-a", "mine", messages.OpCat))
	spoof.Data, _ = json.Marshal(messages.Request{Op: messages.OpCat, Namespace: "team-b", Vault: "secret", Args: json.RawMessage(`{"path":"/plan.txt"}`)})
	spoof.Header.Set(messages.HeaderReplyTo, inbox)
	js, _ := jetstream.New(nc)
	if _, err := js.PublishMsg(context.Background(), spoof); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var spoofed messages.Reply
	if json.Unmarshal(m.Data, &spoofed); spoofed.Error == nil || spoofed.Error.Code != messages.CodePermissionDenied {
		t.Fatalf("a's request whose body names b's vault: %s, want PERMISSION_DENIED", m.Data)
	}

	// team-b's data is exactly as it was.
	if got := b.ok("--vault", "secret", "cat", "/plan.txt")["content"]; got != "b's secret" {
		t.Fatalf("b's file: %v", got)
	}
	if ls := b.ok("--vault", "secret", "ls", "/")["entries"].([]any); len(ls) != 1 {
		t.Fatalf("b's vault holds %v", ls)
	}
	if list := b.ok("vault", "list")["vaults"].([]any); len(list) != 1 {
		t.Fatalf("team-b lists %v", list)
	}
	if ap := b.ok("approval", "show", approvalID)["approval"].(map[string]any); ap["status"] != "pending" {
		t.Fatalf("b's approval after team-a's attempts: %v", ap)
	}
	if rep := b.do(bc, "secret", "job-1", messages.OpExec, messages.ExecArgs{Shell: "cat plan.txt"}); rep.Error != nil || !strings.Contains(string(rep.Result), "b's secret") {
		t.Fatalf("b's replay of its own request: %s %v", rep.Result, rep.Error)
	}
}
