package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/embedded"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// workerHost is what a tenant's command must never reach: the worker's
// process, its home and the password it joined the fleet with.
type workerHost struct {
	url    string // the nats-server's
	base   string // the directory holding home, shared with every sandbox (sandbox.binds)
	home   string // the worker's $AVFS_HOME: store, worker id, mounts, caches
	pid    int    // the `avfs worker` process
	secret string // its NATS password, in its environment only
}

// confinedFleet runs nats-server with docs/nats-permissions.example.conf
// itself (passwords from the environment, as the file says), a dispatcher
// connected as the file's fleet user, and a real `avfs worker` process
// that joins as avfs-worker with a password only its environment holds.
// The worker's home sits in a directory its configuration shares,
// read-only, with every sandbox (sandbox.binds): the home must stay
// hidden even there.
func confinedFleet(t *testing.T) workerHost {
	t.Helper()
	secret := fmt.Sprintf("worker-pw-%d-%x", time.Now().UnixNano(), os.Getpid())
	for k, v := range map[string]string{"AVFS_DISPATCHER_PASSWORD": "pw-d", "AVFS_WORKER_PASSWORD": secret,
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
	ctx, cancel := context.WithCancel(context.Background())
	dnc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("avfs-dispatcher", "pw-d"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnc.Close)
	js, _ := jetstream.New(dnc)
	if err := embedded.Setup(ctx, js, embedded.Topology{}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(ctx, dnc, dispatcher.Options{ID: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// Not under /tmp, which the policy lets commands name (their /tmp is
	// private): the policy must deny a command naming the worker's home.
	base, err := os.MkdirTemp("/var/tmp", "avfs-tenants-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	h := workerHost{url: ns.ClientURL(), base: base, secret: secret}
	h.home = filepath.Join(h.base, "home")
	if err := os.MkdirAll(h.home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("sandbox:\n  binds: [%q]\n", h.base)
	if err := os.WriteFile(filepath.Join(h.home, "avfs.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "worker", "--id", "w1")
	cmd.Env = append(envWithout("AVFS_"), "AVFS_HOME="+h.home, "AVFS_NATS_URL="+h.url,
		"AVFS_NATS_USER=avfs-worker", "AVFS_NATS_PASSWORD="+secret)
	var werr bytes.Buffer
	cmd.Stderr = &werr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.pid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		detachMountsUnder(h.home)
	})
	err = poll.For(30*time.Second, "the worker joins", func() (bool, error) {
		select {
		case <-exited:
			t.Fatalf("avfs worker exited: %s", werr.String())
		default:
		}
		s, err := dispatcher.Status(ctx, js)
		return err == nil && len(s.Workers) == 1, err
	})
	if err != nil {
		cmd.Process.Kill()
		<-exited // werr is complete
		t.Fatalf("%v: %s", err, werr.String())
	}
	return h
}

// envWithout is this process's environment without the variables whose
// names start with prefix.
func envWithout(prefix string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
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
	cmd.Env = append(envWithout("AVFS_"), "AVFS_HOME="+tn.home, "AVFS_NATS_URL="+tn.url, "AVFS_NATS_USER="+tn.user, "AVFS_NATS_PASSWORD="+tn.pw,
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
	want := 1
	if slices.Contains(args, "exec") {
		want = 125 // avfs's refusal, not the command's exit status
	}
	if exit != want || e == nil || e["code"] != string(code) {
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
// exactly as before; team-a's commands, run in the sandbox of a real
// `avfs worker` process, reach neither the worker nor team-b
// (probeSandbox). docs/protocol.md ("What a tenant cannot do") lists what
// this proves.
func TestTenantsStayApart(t *testing.T) {
	host := confinedFleet(t)
	url := host.url
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

	// team-a's commands, in the sandbox, reach neither the worker nor
	// team-b: each probe once as a command naming the worker's paths (the
	// policy denies it) and once hidden from the policy, so that the
	// sandbox alone must stop it.
	probeSandbox(t, host, a, b)

	// team-b's data is exactly as it was.
	if got := b.ok("--vault", "secret", "cat", "/plan.txt")["content"]; got != "b's secret" {
		t.Fatalf("b's file: %v", got)
	}
	if ls := b.ok("--vault", "secret", "ls", "/")["entries"].([]any); len(ls) != 1 {
		t.Fatalf("b's vault holds %v", ls)
	}
	if list := b.ok("vault", "list")["vaults"].([]any); len(list) != 2 { // secret, and vault-b of probeSandbox
		t.Fatalf("team-b lists %v", list)
	}
	if ap := b.ok("approval", "show", approvalID)["approval"].(map[string]any); ap["status"] != "pending" {
		t.Fatalf("b's approval after team-a's attempts: %v", ap)
	}
	if rep := b.do(bc, "secret", "job-1", messages.OpExec, messages.ExecArgs{Shell: "cat plan.txt"}); rep.Error != nil || !strings.Contains(string(rep.Result), "b's secret") {
		t.Fatalf("b's replay of its own request: %s %v", rep.Result, rep.Error)
	}
}

// probeSandbox runs team-a's commands against the worker's host and
// team-b's data (see TestTenantsStayApart): the worker's store and home,
// team-b's mount and Go build cache, a token in team-b's vault, and the
// worker's NATS password in its environment. Each probe fails in its own
// way, and neither the token nor the password appears in any output.
func probeSandbox(t *testing.T, host workerHost, a, b *tenant) {
	token := fmt.Sprintf("team-b-token-%d", time.Now().UnixNano())
	b.ok("vault", "create", "vault-b")
	b.ok("--vault", "vault-b", "write", "/token.txt", token)
	// team-b writes into its Go build cache, and its mount stays active.
	bEnv := b.ok("--vault", "vault-b", "exec", "--shell", hidden(`mkdir -p "$GOCACHE" && cat token.txt > "$GOCACHE/team-b-marker" && printf %s "$GOCACHE"`))
	bCache, _ := bEnv["stdout"].(string)
	if bEnv["exit_code"] != float64(0) || !filepath.IsAbs(bCache) {
		t.Fatalf("team-b's build: %v", bEnv)
	}
	// Wherever it went, it is gone after the test.
	t.Cleanup(func() { os.Remove(filepath.Join(bCache, "team-b-marker")) })
	bMount := filepath.Join(host.home, "mnt", "team-b", "vault-b")
	if env := b.ok("--vault", "vault-b", "exec", "--shell", "pwd"); env["stdout"] != bMount+"\n" {
		t.Fatalf("team-b's command runs in %v, want %s", env["stdout"], bMount)
	}
	a.ok("vault", "create", "probe")
	aEnv := a.ok("--vault", "probe", "exec", "--shell", `printf %s "$GOCACHE"`)
	aCache, _ := aEnv["stdout"].(string)
	if aCache == bCache {
		t.Errorf("team-a and team-b share the Go build cache %s", aCache)
	}

	// run runs script as team-a, with env (K=V) set, and checks that no
	// output holds the token or the worker's password.
	run := func(script string, env ...string) map[string]any {
		t.Helper()
		args := []string{"--vault", "probe", "exec", "--checkpoint", "never"}
		for _, kv := range env {
			args = append(args, "--env", kv)
		}
		doc, _ := a.cli(append(args, "--shell", script)...)
		out := fmt.Sprint(doc["stdout"], doc["stderr"])
		if all, _ := json.Marshal(doc); strings.Contains(string(all), host.secret) || strings.Contains(out, token) {
			t.Errorf("team-a's %q (env %v) printed a secret: %v", script, env, doc)
		}
		return doc
	}
	// fails asserts that script, named in the clear, is denied by the
	// policy, and that hidden from it, it runs and fails with want on
	// stderr.
	fails := func(script, want string, env ...string) {
		t.Helper()
		if doc := run(script, env...); doc["status"] != string(messages.StatusDenied) {
			t.Errorf("team-a's %q: %v %v, want denied by the policy", script, doc["status"], doc["decision"])
		}
		doc := run(hidden(script), env...)
		stderr, _ := doc["stderr"].(string)
		if doc["status"] != string(messages.StatusCompleted) || doc["exit_code"] == float64(0) || !strings.Contains(stderr, want) {
			t.Errorf("team-a's hidden %q (env %v): status %v, exit %v, stdout %q, stderr %q, want a failure with %q",
				script, env, doc["status"], doc["exit_code"], doc["stdout"], stderr, want)
		}
	}
	const noSuch = "No such file or directory"
	store := filepath.Join(host.home, "store.db")
	fails("cat "+store, noSuch)
	fails("cat "+filepath.Join(host.home, "worker-id"), noSuch)
	fails("ls "+bMount, noSuch)
	fails("cat "+filepath.Join(bMount, "token.txt"), noSuch)
	fails("cat "+filepath.Join(bCache, "team-b-marker"), noSuch)
	fails(fmt.Sprintf("cat /proc/%d/environ", host.pid), noSuch)
	// The token is nowhere team-a's command can read.
	fails("grep -r -l -F "+token+" "+host.base+" /tmp "+aCache+" || (echo nothing >&2; exit 1)", "nothing")
	// Naming the worker's paths in the command's environment (the
	// toolchain variables whose directories a sandbox shows) shows
	// nothing more.
	fails("cat "+store, noSuch, "GOCACHE="+host.home)
	fails("cat "+filepath.Join(bMount, "token.txt"), noSuch, "GOPATH="+bMount)
	fails("cat "+filepath.Join(bCache, "team-b-marker"), noSuch, "GOMODCACHE="+bCache)
	// Nor can it change the worker's files: its home is an empty,
	// read-only directory there.
	fails("echo x > "+store, "Read-only file system", "GOCACHE="+host.home)
	fails("rm "+filepath.Join(bMount, "token.txt"), noSuch, "GOCACHE="+host.home)
	if got := b.ok("--vault", "vault-b", "cat", "/token.txt")["content"]; got != token {
		t.Errorf("team-b's token after team-a's probes: %v", got)
	}

	// The worker's home, listed: only the way to team-a's own mount and
	// build cache, none of the worker's files.
	var want []string
	for _, p := range []string{filepath.Join(host.home, "mnt", "team-a", "probe"), aCache} {
		for dir := p; strings.HasPrefix(dir, host.home+"/"); dir = filepath.Dir(dir) {
			if strings.Count(strings.TrimPrefix(dir, host.home), "/") <= 2 && !slices.Contains(want, dir) {
				want = append(want, dir)
			}
		}
	}
	want = append(want, host.home)
	sort.Strings(want)
	for _, env := range [][]string{nil, {"GOCACHE=" + host.home}} {
		doc := run(hidden("find "+host.home+" -maxdepth 2 | sort"), env...)
		if got := strings.Fields(fmt.Sprint(doc["stdout"])); !slices.Equal(got, want) {
			t.Errorf("team-a lists the worker's home (env %v): %q, want %q", env, got, want)
		}
	}
	// The environment: the command's own, /proc/1 (the sandbox's init) and
	// every process it can see hold no fleet credential.
	for _, script := range []string{"env", "cat /proc/1/environ", "cat /proc/[0-9]*/environ"} {
		doc := run(hidden(script))
		if strings.Contains(fmt.Sprint(doc["stdout"]), "AVFS_NATS") {
			t.Errorf("team-a's %q shows the worker's NATS settings: %v", script, doc["stdout"])
		}
	}
	if doc := run("cat /proc/1/environ"); doc["status"] != string(messages.StatusDenied) {
		t.Errorf("team-a's cat /proc/1/environ: %v, want denied by the policy", doc["status"])
	}
}

// hidden wraps script so that the policy sees only echo, base64 and sh:
// what the script does is up to the sandbox alone.
func hidden(script string) string {
	return "echo " + base64.StdEncoding.EncodeToString([]byte(script)) + " | base64 -d | sh"
}
