package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/avfs/avfs/exec"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/policy"
)

// The first example: a script written into the vault reads the
// host. In the sandbox it sees its vault, not the host, other vaults or
// the worker's home, and the envelope says how it ran.
func TestExecSeesOnlyItsVault(t *testing.T) {
	secret := filepath.Join("/root", fmt.Sprintf(".avfs-worker-secret-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "other", messages.VaultCreateArgs{}, nil)
	f.write("other", "/private.txt", "other vault's file\n")
	f.exec("other", messages.ExecArgs{Argv: []string{"true"}}) // mounted now
	f.do(messages.OpVaultCreate, "s", messages.VaultCreateArgs{}, nil)
	f.write("s", "/evil.sh", "cat /etc/hostname\ncat "+secret+"\nls ..\ncat ../other/private.txt\nln -s "+secret+" link; cat link\necho kept > out.txt\n")

	env := f.exec("s", messages.ExecArgs{Argv: []string{"sh", "evil.sh"}})
	if env.Status != messages.StatusCompleted {
		t.Fatalf("status %s: %s %s", env.Status, env.Error, env.Stderr)
	}
	if env.Sandbox == nil || env.Sandbox.Mode != messages.SandboxNamespaces || env.Sandbox.Network {
		t.Fatalf("sandbox %+v, want namespaces without network", env.Sandbox)
	}
	for _, leak := range []string{"host secret", "other vault", "other\n"} {
		if strings.Contains(env.Stdout, leak) {
			t.Errorf("the command saw %q:\n%s", leak, env.Stdout)
		}
	}
	if env.Stdout != "s\n" {
		t.Errorf("stdout %q, want only the vault's own directory listed", env.Stdout)
	}
	for _, why := range []string{"/etc/hostname: No such file", secret + ": No such file", "../other/private.txt: No such file", "link: No such file"} {
		if !strings.Contains(env.Stderr, why) {
			t.Errorf("stderr lacks %q:\n%s", why, env.Stderr)
		}
	}
	var cat messages.CatResult
	f.do(messages.OpCat, "s", messages.PathArgs{Path: "/out.txt"}, &cat)
	if cat.Content == nil || *cat.Content != "kept\n" {
		t.Fatalf("the write into the vault is not in it: %v", cat.Content)
	}
}

// make and npm work inside the sandbox (cargo, go and git: runner_test.go).
func TestMakeAndNpmInSandbox(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "tools", messages.VaultCreateArgs{}, nil)
	f.write("tools", "/Makefile", "out.txt: in.txt\n\ttr a-z A-Z < in.txt > out.txt\n")
	f.write("tools", "/in.txt", "made\n")
	f.write("tools", "/package.json", `{"name": "t", "version": "1.0.0", "scripts": {"test": "node test.js"}}`)
	f.write("tools", "/test.js", "const assert = require('assert');\nassert.strictEqual(require('os').hostname(), 'avfs');\nconsole.log('npm test ok');\n")
	env := f.exec("tools", messages.ExecArgs{Shell: "make && cat out.txt && npm test"})
	if env.Status != messages.StatusCompleted || env.ExitCode == nil || *env.ExitCode != 0 {
		t.Fatalf("status %s exit %v\n%s\n%s", env.Status, env.ExitCode, env.Stdout, env.Stderr)
	}
	if !strings.Contains(env.Stdout, "MADE\n") || !strings.Contains(env.Stdout, "npm test ok") {
		t.Fatalf("stdout %q", env.Stdout)
	}
}

// hostServer answers HTTP on 127.0.0.1, as the fleet's NATS port would
// answer a connection, and returns its address.
func hostServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached the host") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// No network by default; the network for a vault that is configured to
// have it, and for a fetch whose rule grants it once it is approved.
func TestNetworkOnlyWhenGranted(t *testing.T) {
	addr := hostServer(t)
	f := newFixture(t, Config{Sandbox: SandboxConfig{Vaults: []VaultSandbox{{Namespace: "default", Vault: "online", Network: true}}}})
	host, port, _ := net.SplitHostPort(addr)
	connect := fmt.Sprintf("python3 -c 'import socket; socket.create_connection((\"%s\", %s)); print(\"connected\")'", host, port)
	f.do(messages.OpVaultCreate, "offline", messages.VaultCreateArgs{}, nil)
	env := f.exec("offline", messages.ExecArgs{Shell: connect})
	if env.Status != messages.StatusCompleted || *env.ExitCode == 0 || !strings.Contains(env.Stderr, "ConnectionRefusedError") || env.Sandbox.Network {
		t.Fatalf("offline vault: exit %v, stderr %q, sandbox %+v; want the connection refused", env.ExitCode, env.Stderr, env.Sandbox)
	}

	f.do(messages.OpVaultCreate, "online", messages.VaultCreateArgs{}, nil)
	env = f.exec("online", messages.ExecArgs{Shell: connect})
	if *env.ExitCode != 0 || env.Stdout != "connected\n" || !env.Sandbox.Network || env.Sandbox.NetworkBy != "vault" {
		t.Fatalf("online vault: exit %v, stdout %q, stderr %q, sandbox %+v", env.ExitCode, env.Stdout, env.Stderr, env.Sandbox)
	}

	// curl needs approval; its rule grants the network to the approved run.
	env = f.exec("offline", messages.ExecArgs{Argv: []string{"curl", "-s", "http://" + addr + "/"}})
	if env.Status != messages.StatusApprovalRequired || !env.Decision.Network {
		t.Fatalf("curl: status %s, decision %+v", env.Status, env.Decision)
	}
	var got messages.ApprovalResult
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, &got)
	run := got.Approval.Envelope
	if run == nil || run.Stdout != "reached the host" || !run.Sandbox.Network || run.Sandbox.NetworkBy != "approval" {
		t.Fatalf("approved curl: %+v", run)
	}
	var ev messages.AuditResult
	f.do(messages.OpAudit, "offline", messages.AuditArgs{Action: "exec.run"}, &ev)
	last := ev.Events[len(ev.Events)-1]
	if last.Details["network"] != true || last.Details["sandbox"] != messages.SandboxNamespaces {
		t.Fatalf("the audit does not record the network given: %v", last.Details)
	}
}

// A rule can require the sandbox: in a vault configured without one, the
// command is refused and the refusal audited; elsewhere it runs.
func TestRuleRequiresSandbox(t *testing.T) {
	rules := append([]policy.Rule{{Name: "python-sandboxed", Programs: []string{"python3"}, Action: policy.Allow, RequireSandbox: true}}, policy.DefaultRules()...)
	pol, err := policy.New(rules, policy.AllowWithCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	f := newPolicyFixture(t, Config{Sandbox: SandboxConfig{Vaults: []VaultSandbox{{Namespace: "default", Vault: "bare", Mode: messages.SandboxNone}}}}, pol)
	f.do(messages.OpVaultCreate, "bare", messages.VaultCreateArgs{}, nil)
	f.do(messages.OpVaultCreate, "boxed", messages.VaultCreateArgs{}, nil)
	env := f.exec("bare", messages.ExecArgs{Shell: "echo x > ran.txt; python3 -c 'print(1)'"})
	if env.Status != messages.StatusDenied || !strings.Contains(env.Decision.Reason, "requires a sandbox") {
		t.Fatalf("bare vault: status %s, decision %+v", env.Status, env.Decision)
	}
	var ev messages.AuditResult
	f.do(messages.OpAudit, "bare", messages.AuditArgs{Action: "exec.denied"}, &ev)
	if len(ev.Events) != 1 || !strings.Contains(fmt.Sprint(ev.Events[0].Details["reason"]), "requires a sandbox") {
		t.Fatalf("the refusal is not audited with its reason: %+v", ev.Events)
	}
	f.do(messages.OpCat, "bare", messages.PathArgs{Path: "/ran.txt"}, nil, messages.CodeNotFound)

	// The same vault's other commands run unsandboxed, as configured.
	env = f.exec("bare", messages.ExecArgs{Argv: []string{"hostname"}})
	if env.Sandbox == nil || env.Sandbox.Mode != messages.SandboxNone || *env.ExitCode != 0 || env.Stdout == "avfs\n" {
		t.Fatalf("mode none: sandbox %+v exit %v stderr %q", env.Sandbox, env.ExitCode, env.Stderr)
	}
	env = f.exec("boxed", messages.ExecArgs{Argv: []string{"python3", "-c", "print(1)"}})
	if env.Status != messages.StatusCompleted || env.Stdout != "1\n" {
		t.Fatalf("boxed vault: status %s stdout %q stderr %q", env.Status, env.Stdout, env.Stderr)
	}
}

// A command killed by its memory limit ends with a status that says so.
func TestMemoryLimitStatus(t *testing.T) {
	f := newFixture(t, Config{Sandbox: SandboxConfig{Limits: exec.Limits{MemoryBytes: 64 << 20}}})
	f.do(messages.OpVaultCreate, "m", messages.VaultCreateArgs{}, nil)
	env := f.exec("m", messages.ExecArgs{Argv: []string{"python3", "-c", "b = bytearray(512 << 20)"}})
	if env.Status != messages.StatusLimitExceeded || env.Signal == nil || *env.Signal != "SIGKILL" ||
		env.Sandbox.Limit != exec.LimitMemory || env.Sandbox.Limits.MemoryBytes != 64<<20 {
		t.Fatalf("status %s, signal %v, sandbox %+v, stderr %q", env.Status, env.Signal, env.Sandbox, env.Stderr)
	}
}

// Where namespaces cannot be made, fallback runs the command without a
// sandbox and says so; without fallback, the plan stays namespaces and the
// run fails with the sandbox's error. The probe's failure is faked: on
// this machine root can always make namespaces, and making it fail for
// real would mean lowering a host-wide limit.
func TestSandboxFallback(t *testing.T) {
	fake := func() error { return fmt.Errorf("fake probe: %w", exec.ErrSandbox) }
	for _, fallback := range []bool{true, false} {
		s := newSandboxes(SandboxConfig{Fallback: fallback, CacheDir: t.TempDir()})
		s.probe = fake
		p, err := s.plan("default", "v", t.TempDir(), nil, nil, "", exec.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: messages.SandboxNone, false: messages.SandboxNamespaces}[fallback]; p.info.Mode != want || (p.sb == nil) != fallback {
			t.Errorf("fallback %v: mode %s, want %s", fallback, p.info.Mode, want)
		}
	}
}

// A request's environment names no directory for the sandbox to show:
// --env GOCACHE or GOPATH naming a host path binds nothing (it bound that
// path, writable for GOCACHE, before). The namespace's own Go build cache
// is the command's GOCACHE, writable, kept under SandboxConfig.CacheDir.
func TestEnvBindsNothingAndBuildCacheIsPerNamespace(t *testing.T) {
	secret := filepath.Join("/root", fmt.Sprintf(".avfs-worker-env-secret-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	cache := filepath.Join(t.TempDir(), "cache")
	f := newFixture(t, Config{Sandbox: SandboxConfig{CacheDir: cache}})
	f.do(messages.OpVaultCreate, "s", messages.VaultCreateArgs{}, nil)
	f.write("s", "/probe.sh", "cat "+secret+"\necho x > "+secret+"\nprintf %s \"$GOCACHE\"\n")
	for _, k := range []string{"GOCACHE", "GOPATH", "GOMODCACHE", "CARGO_HOME"} {
		env := f.exec("s", messages.ExecArgs{Argv: []string{"sh", "probe.sh"}, Env: map[string]string{k: "/root"}})
		if strings.Contains(env.Stdout, "host secret") || !strings.Contains(env.Stderr, secret+": No such file") {
			t.Errorf("--env %s=/root: stdout %q, stderr %q, want the secret unseen", k, env.Stdout, env.Stderr)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret\n" {
		t.Fatalf("the host file after the probes: %q %v", b, err)
	}
	want := filepath.Join(cache, "default", "go-build")
	env := f.exec("s", messages.ExecArgs{Shell: `printf %s "$GOCACHE" && echo built > "$GOCACHE/entry"`})
	if env.Stdout != want || env.ExitCode == nil || *env.ExitCode != 0 {
		t.Fatalf("GOCACHE %q (exit %v, %s), want %s, writable", env.Stdout, env.ExitCode, env.Stderr, want)
	}
	if b, err := os.ReadFile(filepath.Join(want, "entry")); err != nil || string(b) != "built\n" {
		t.Fatalf("the cache entry on the host: %q %v", b, err)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v %v, want 0700", fi.Mode(), err)
	}
}

// Go trusts what it finds in its build cache, so a cache shared by
// tenants would let one plant results that another's go build uses: each
// namespace writes a cache of its own, and the host's is not written.
func TestBuildCachePerNamespace(t *testing.T) {
	f := newFixture(t, Config{})
	do := func(ns string, op messages.Op, vaultName string, args any) messages.Envelope {
		t.Helper()
		b, _ := json.Marshal(args)
		rep := f.h.Handle(context.Background(), messages.Request{Op: op, Namespace: ns, Vault: vaultName, Args: b, Actor: "test"})
		if rep.Error != nil {
			t.Fatalf("%s %s: %v", ns, op, rep.Error)
		}
		var env messages.Envelope
		json.Unmarshal(rep.Result, &env)
		return env
	}
	plant := fmt.Sprintf("planted-%d", os.Getpid())
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		do(ns, messages.OpVaultCreate, "v", messages.VaultCreateArgs{})
	}
	a := do("tenant-a", messages.OpExec, "v", messages.ExecArgs{Shell: `echo bad > "$GOCACHE/` + plant + `" && echo "$GOCACHE"`})
	if a.Status != messages.StatusCompleted || a.ExitCode == nil || *a.ExitCode != 0 {
		t.Fatalf("tenant A cannot write its own cache: exit %v, stderr %q", a.ExitCode, a.Stderr)
	}
	b := do("tenant-b", messages.OpExec, "v", messages.ExecArgs{Shell: `go env GOCACHE; cat "$GOCACHE/` + plant + `"`})
	if strings.Contains(b.Stdout, "bad") || b.ExitCode == nil || *b.ExitCode == 0 {
		t.Errorf("tenant B reads tenant A's cache entry: exit %v, stdout %q", b.ExitCode, b.Stdout)
	}
	if strings.TrimSpace(b.Stdout) == strings.TrimSpace(a.Stdout) {
		t.Errorf("both tenants use the build cache %s", a.Stdout)
	}
	if host, err := os.UserCacheDir(); err == nil {
		if _, err := os.Stat(filepath.Join(host, "go-build", plant)); err == nil {
			os.Remove(filepath.Join(host, "go-build", plant))
			t.Errorf("the host's shared build cache got the planted file")
		}
	}
	// Naming a shared cache explicitly does not reach it either.
	shared := t.TempDir()
	c := do("tenant-a", messages.OpExec, "v", messages.ExecArgs{Shell: `echo bad > "$GOCACHE/` + plant + `"`, Env: map[string]string{"GOCACHE": shared}})
	if _, err := os.Stat(filepath.Join(shared, plant)); err == nil {
		t.Errorf("--env GOCACHE=%s: the shared cache got the planted file (exit %v)", shared, c.ExitCode)
	}
}

// What the sandbox refused a command is in its envelope and its audit
// event: a mount, and a connection off the loopback without the network.
func TestRefusalsAudited(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "r", messages.VaultCreateArgs{}, nil)
	// The policy checks the command line only: a script gets past it.
	f.write("r", "/try.sh", "mount -t tmpfs none /tmp; unshare -m true; python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 443), timeout=5)'; exit 0\n")
	env := f.exec("r", messages.ExecArgs{Argv: []string{"sh", "try.sh"}})
	if env.Status != messages.StatusCompleted {
		t.Fatalf("status %s: %s %s", env.Status, env.Error, env.Stderr)
	}
	want := map[string]bool{"syscall mount ": true, "syscall unshare ": true, "network connect 192.0.2.1:443": true}
	for _, r := range env.Sandbox.Refused {
		delete(want, r.Kind+" "+r.Call+" "+r.Target)
	}
	if len(want) > 0 {
		t.Fatalf("envelope refusals %+v lack %v (stderr %q)", env.Sandbox.Refused, want, env.Stderr)
	}
	var ev messages.AuditResult
	f.do(messages.OpAudit, "r", messages.AuditArgs{Action: "exec.run"}, &ev)
	last := ev.Events[len(ev.Events)-1]
	b, _ := json.Marshal(last.Details["refused"])
	if !strings.Contains(string(b), `"call":"mount"`) || !strings.Contains(string(b), `"target":"192.0.2.1:443"`) {
		t.Fatalf("audit details.refused = %s", b)
	}
	// Nothing refused, nothing listed.
	if env := f.exec("r", messages.ExecArgs{Shell: "true"}); env.Sandbox.Refused != nil {
		t.Errorf("a plain command has refusals %+v", env.Sandbox.Refused)
	}
}

// A command may lower its vault's limits, never raise them; the envelope
// says what applied, and a command its own memory limit killed ends
// limit_exceeded.
func TestCommandLimits(t *testing.T) {
	f := newFixture(t, Config{Sandbox: SandboxConfig{Limits: exec.Limits{MemoryBytes: 256 << 20},
		Vaults: []VaultSandbox{{Namespace: "default", Vault: "bare", Mode: messages.SandboxNone}}}})
	f.do(messages.OpVaultCreate, "l", messages.VaultCreateArgs{}, nil)
	f.do(messages.OpVaultCreate, "bare", messages.VaultCreateArgs{}, nil)
	env := f.exec("l", messages.ExecArgs{Argv: []string{"python3", "-c", "b = bytearray(128 << 20)"}, MemoryMB: 64, Pids: 50, CPUs: 0.5})
	if env.Status != messages.StatusLimitExceeded || env.Sandbox.Limit != exec.LimitMemory ||
		env.Sandbox.Limits != (messages.SandboxLimits{MemoryBytes: 64 << 20, Pids: 50, CPUs: 0.5}) {
		t.Fatalf("--memory-mb 64: status %s, sandbox %+v, stderr %q", env.Status, env.Sandbox, env.Stderr)
	}
	// Within the vault's limit the same allocation passes.
	env = f.exec("l", messages.ExecArgs{Argv: []string{"python3", "-c", "b = bytearray(128 << 20)"}})
	if env.Status != messages.StatusCompleted || env.Sandbox.Limits.MemoryBytes != 256<<20 {
		t.Fatalf("vault limit: status %s, sandbox %+v, stderr %q", env.Status, env.Sandbox, env.Stderr)
	}
	// Raising a limit, a negative one, or limits without a sandbox: refused,
	// and nothing runs.
	for _, c := range []struct {
		vault string
		args  messages.ExecArgs
	}{
		{"l", messages.ExecArgs{Shell: "echo ran > ran", MemoryMB: 512}},
		{"l", messages.ExecArgs{Shell: "echo ran > ran", Pids: -1}},
		{"bare", messages.ExecArgs{Shell: "echo ran > ran", Pids: 10}},
		// Past what a limit can hold: a MiB count that overflows in
		// bytes (it came out negative), a CPU share of no meaning.
		{"l", messages.ExecArgs{Shell: "echo ran > ran", MemoryMB: math.MaxInt64}},
		{"l", messages.ExecArgs{Shell: "echo ran > ran", CPUs: 1e308}},
	} {
		f.do(messages.OpExec, c.vault, c.args, nil, messages.CodeInvalidArgument)
		var cat messages.CatResult
		if f.do(messages.OpCat, c.vault, messages.PathArgs{Path: "/ran"}, &cat, messages.CodeNotFound) == nil {
			t.Errorf("%s %+v: the command ran", c.vault, c.args)
		}
	}
	// NaN cannot cross JSON; a Go caller of Exec can pass it.
	_, err := f.r.Exec(context.Background(), messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "l", Actor: "test"},
		messages.ExecArgs{Shell: "echo ran > ran", CPUs: math.NaN()})
	if me := (*messages.Error)(nil); !errors.As(err, &me) || me.Code != messages.CodeInvalidArgument {
		t.Errorf("--cpus NaN through Exec: %v, want INVALID_ARGUMENT", err)
	}
	f.do(messages.OpCat, "l", messages.PathArgs{Path: "/ran"}, nil, messages.CodeNotFound)
}
