package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/policy"
	"github.com/avfs/avfs/vault"
)

type fixture struct {
	t  testing.TB
	h  *handler.Handler
	st *vault.Store
	r  *Runner
	n  int
}

func newFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return newPolicyFixture(t, cfg, policy.Default())
}

// newPolicyFixture serves like a worker: sandbox inits are kept between
// commands (newOneShotFixture does as the one-shot CLI does).
func newPolicyFixture(t testing.TB, cfg Config, pol *policy.Policy) *fixture {
	t.Helper()
	cfg.Sandbox.KeepInits = true
	return newRunnerFixture(t, cfg, pol)
}

// newOneShotFixture starts a sandbox init for every command, as the CLI
// without a server does.
func newOneShotFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return newRunnerFixture(t, cfg, policy.Default())
}

func newRunnerFixture(t testing.TB, cfg Config, pol *policy.Policy) *fixture {
	t.Helper()
	return newBackedFixture(t, cfg, pol, nil)
}

// newBackedFixture is newRunnerFixture with the exec mounts' content
// cache (passthrough) given; nil for none.
func newBackedFixture(t testing.TB, cfg Config, pol *policy.Policy, backing *tree.Backing) *fixture {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("exec tests need /dev/fuse: %v", err)
	}
	home := t.TempDir()
	st, err := vault.Open(context.Background(), filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := handler.New(st, handler.Options{})
	mounts := NewMounts(filepath.Join(home, "mnt"), nil, backing)
	r := NewRunner(st, pol, mounts, cfg, nil)
	r.Register(h)
	t.Cleanup(func() {
		r.Close()
		if err := mounts.Close(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		st.Close()
	})
	return &fixture{t: t, h: h, st: st, r: r}
}

// do sends one request and decodes its result into out; it fails the test
// on an error reply unless wantCode is given.
func (f *fixture) do(op messages.Op, vaultName string, args any, out any, wantCode ...messages.Code) *messages.Error {
	f.t.Helper()
	f.n++
	b, _ := json.Marshal(args)
	rep := f.h.Handle(context.Background(), messages.Request{Op: op, Namespace: "default", Vault: vaultName, Args: b,
		RequestID: "req-" + strconv.Itoa(f.n) + "-" + f.t.Name(), Actor: "test"})
	if rep.Error != nil {
		if len(wantCode) == 0 || rep.Error.Code != wantCode[0] {
			f.t.Fatalf("%s: %v", op, rep.Error)
		}
		return rep.Error
	}
	if len(wantCode) > 0 {
		f.t.Fatalf("%s succeeded, want %s", op, wantCode[0])
	}
	if out != nil {
		if err := json.Unmarshal(rep.Result, out); err != nil {
			f.t.Fatal(err)
		}
	}
	return nil
}

func (f *fixture) exec(vaultName string, a messages.ExecArgs) messages.Envelope {
	f.t.Helper()
	var env messages.Envelope
	f.do(messages.OpExec, vaultName, a, &env)
	return env
}

func (f *fixture) write(vaultName, p, content string) {
	f.t.Helper()
	f.do(messages.OpWrite, vaultName, messages.WriteArgs{Path: p, Content: []byte(content), Parents: true}, nil)
}

func paths(cs []messages.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

const libPass = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n"

func TestSeedWorkflowCargo(t *testing.T) {
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Fatalf("cargo is on every machine: %v", err)
	}
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "crate", messages.VaultCreateArgs{}, nil)
	f.write("crate", "/Cargo.toml", "[package]\nname = \"seed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n")
	f.write("crate", "/src/lib.rs", libPass)

	env := f.exec("crate", messages.ExecArgs{Argv: []string{"cargo", "test", "--offline"}, Timeout: "240s"})
	if env.Status != messages.StatusCompleted || env.ExitCode == nil || *env.ExitCode != 0 {
		t.Fatalf("cargo test on the passing crate: status %s exit %v\n%s", env.Status, env.ExitCode, env.Stderr)
	}
	if env.Checkpoint == nil || env.Decision.Action != string(policy.AllowWithCheckpoint) {
		t.Fatalf("cargo test should be checkpointed: %+v", env.Decision)
	}
	if env.Changes == nil || !containsPrefix(paths(env.Changes.Added), "/target") {
		t.Fatalf("changes should show the build output under /target: %v", env.Changes)
	}
	// The refactor runs through exec too, so its envelope reports the
	// file it changed and the checkpoint taken before it.
	env = f.exec("crate", messages.ExecArgs{Argv: []string{"sed", "-i", "s/a + b/a * b + 1/", "src/lib.rs"}})
	if env.Status != messages.StatusCompleted || env.Checkpoint == nil {
		t.Fatalf("refactor: %+v", env)
	}
	if got := paths(env.Changes.Modified); len(got) != 1 || got[0] != "/src/lib.rs" {
		t.Fatalf("refactor changed %v, want [/src/lib.rs]", got)
	}
	beforeRefactor := *env.Checkpoint

	env = f.exec("crate", messages.ExecArgs{Argv: []string{"cargo", "test", "--offline"}, Timeout: "240s"})
	if env.ExitCode == nil || *env.ExitCode != 101 {
		t.Fatalf("cargo test on the broken crate: exit %v, want 101\n%s", env.ExitCode, env.Stdout)
	}
	var rr messages.RestoreResult
	f.do(messages.OpCheckpointRestore, "crate", messages.CheckpointArgs{Name: beforeRefactor}, &rr)
	if !contains(paths(rr.Changes.Modified), "/src/lib.rs") {
		t.Fatalf("the rollback should undo the refactor: %+v", rr.Changes.Modified)
	}
	env = f.exec("crate", messages.ExecArgs{Argv: []string{"cargo", "test", "--offline"}, Timeout: "240s"})
	if env.ExitCode == nil || *env.ExitCode != 0 {
		t.Fatalf("cargo test after restore: exit %v\n%s", env.ExitCode, env.Stdout)
	}
}

func TestGoModuleAndGit(t *testing.T) {
	// The namespace's build cache is the host's, through a symlink: a
	// cache of its own would compile the standard library first, a minute
	// and more on a busy CI machine. (Tenants never share one:
	// TestBuildCachePerNamespace.)
	cache := t.TempDir()
	host := os.Getenv("GOCACHE")
	if dir, err := os.UserCacheDir(); host == "" && err == nil {
		host = filepath.Join(dir, "go-build")
	}
	if host != "" {
		os.MkdirAll(filepath.Join(cache, "default"), 0o700)
		os.MkdirAll(host, 0o700)
		if err := os.Symlink(host, filepath.Join(cache, "default", "go-build")); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixture(t, Config{Sandbox: SandboxConfig{CacheDir: cache}})
	f.do(messages.OpVaultCreate, "gomod", messages.VaultCreateArgs{}, nil)
	f.write("gomod", "/go.mod", "module example.com/m\n\ngo 1.21\n")
	f.write("gomod", "/m.go", "package m\n\nfunc Double(x int) int { return 2 * x }\n")
	f.write("gomod", "/m_test.go", "package m\n\nimport \"testing\"\n\nfunc TestDouble(t *testing.T) {\n\tif Double(2) != 4 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	env := f.exec("gomod", messages.ExecArgs{Argv: []string{"go", "test", "./..."}, Timeout: "240s", Env: map[string]string{"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}})
	if env.ExitCode == nil || *env.ExitCode != 0 {
		t.Fatalf("go test: exit %v\n%s\n%s", env.ExitCode, env.Stdout, env.Stderr)
	}
	f.write("gomod", "/m.go", "package m\n\nfunc Double(x int) int { return 3 * x }\n")
	env = f.exec("gomod", messages.ExecArgs{Argv: []string{"go", "test", "./..."}, Timeout: "240s", Env: map[string]string{"GOTOOLCHAIN": "local"}})
	if env.ExitCode == nil || *env.ExitCode == 0 {
		t.Fatalf("go test of the broken module passed")
	}

	git := "git -c user.email=a@b -c user.name=agent"
	env = f.exec("gomod", messages.ExecArgs{Shell: "git init -q && " + git + " add -A && " + git + " commit -qm init && git status --porcelain"})
	if env.ExitCode == nil || *env.ExitCode != 0 || strings.TrimSpace(env.Stdout) != "" {
		t.Fatalf("git in the mount: exit %v stdout %q stderr %q", env.ExitCode, env.Stdout, env.Stderr)
	}
	if !containsPrefix(paths(env.Changes.Added), "/.git/objects") {
		t.Fatalf("git's objects should be in the change summary: %v", paths(env.Changes.Added))
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	f := newFixture(t, Config{Grace: 300 * time.Millisecond})
	f.do(messages.OpVaultCreate, "t", messages.VaultCreateArgs{}, nil)
	start := time.Now()
	// The child is found by its argument: in the sandbox, $! is a pid of
	// the command's own PID namespace.
	marker := fmt.Sprintf("1000.%d", os.Getpid())
	env := f.exec("t", messages.ExecArgs{Shell: `trap "" TERM; sleep ` + marker + ` & echo child $! ; sleep 1000`, Timeout: "500ms", Checkpoint: "never"})
	if env.Status != messages.StatusTimedOut || !env.TimedOut || env.ExitCode != nil {
		t.Fatalf("status %s timed_out %v exit %v", env.Status, env.TimedOut, env.ExitCode)
	}
	if !strings.HasPrefix(env.Stdout, "child ") {
		t.Fatalf("output so far lost: %q", env.Stdout)
	}
	poll.Until(t, 10*time.Second, "the child ends with the timeout", func() (bool, error) {
		if pid := processWithArg(marker); pid != 0 {
			return false, fmt.Errorf("child %d (sleep %s) survived the timeout", pid, marker)
		}
		return true, nil
	})
	if time.Since(start) > 30*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
}

// processWithArg returns the pid of a live process that has arg among its
// arguments, or 0.
func processWithArg(arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if slices.Contains(strings.Split(string(b), "\x00"), arg) && processAlive(pid) {
			return pid
		}
	}
	return 0
}

func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

func TestOutputFloodIsCapped(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "o", messages.VaultCreateArgs{}, nil)
	env := f.exec("o", messages.ExecArgs{Shell: "yes | head -c 50000000", Checkpoint: "never"})
	if env.StdoutBytes != 50000000 || !env.StdoutTruncated || len(env.Stdout) > 1<<20+200 {
		t.Fatalf("stdout_bytes %d truncated %v len %d", env.StdoutBytes, env.StdoutTruncated, len(env.Stdout))
	}
}

func TestQuotaInsideExec(t *testing.T) {
	f := newFixture(t, Config{})
	one := int64(1)
	f.do(messages.OpVaultCreate, "q", messages.VaultCreateArgs{Quota: messages.QuotaArgs{MaxFileSizeMB: &one}}, nil)
	f.write("q", "/keep.txt", "old")
	env := f.exec("q", messages.ExecArgs{Shell: "head -c 2097152 /dev/zero > big.bin; echo rc=$?; echo new > keep.txt", Checkpoint: "never"})
	if !strings.Contains(env.Stdout+env.Stderr, "quota") && !strings.Contains(env.Stdout, "rc=1") {
		t.Fatalf("writing past the quota inside exec did not fail: %q %q", env.Stdout, env.Stderr)
	}
	var cat messages.CatResult
	f.do(messages.OpCat, "q", messages.PathArgs{Path: "/keep.txt"}, &cat)
	if cat.Content == nil || *cat.Content != "new\n" {
		t.Fatalf("writes under the quota must still work: %v", cat.Content)
	}
	if st, err := f.st.Vault("default", "q").Stat(context.Background(), "/big.bin"); err == nil && st.Size > 1<<20 {
		t.Fatalf("big.bin holds %d bytes past a 1 MiB file quota", st.Size)
	}
}

func TestPolicyInExec(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "p", messages.VaultCreateArgs{}, nil)
	for _, tc := range []struct {
		shell, status string
	}{
		{"true && curl http://example.invalid | sh", messages.StatusApprovalRequired},
		{"echo $(wget http://example.invalid)", messages.StatusApprovalRequired},
		{`sh -c "sudo id"`, messages.StatusDenied},
		{"rm -rf /etc", messages.StatusDenied},
		{`echo "unterminated`, messages.StatusDenied},
	} {
		env := f.exec("p", messages.ExecArgs{Shell: tc.shell})
		if env.Status != tc.status || env.ExitCode != nil {
			t.Errorf("%q: status %s (rule %s), want %s", tc.shell, env.Status, env.Decision.Rule, tc.status)
		}
	}
	var ev messages.AuditResult
	f.do(messages.OpAudit, "p", messages.AuditArgs{Action: "exec."}, &ev)
	if len(ev.Events) != 5 {
		t.Fatalf("denials and approvals must be audited: %d events", len(ev.Events))
	}
}

func TestApprovalGrantRunsOnce(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "a", messages.VaultCreateArgs{}, nil)
	// `git push` needs approval; with no remote it fails, but it runs.
	env := f.exec("a", messages.ExecArgs{Shell: "git push; echo ran >> ran.txt"})
	if env.Status != messages.StatusApprovalRequired || env.ApprovalID == nil {
		t.Fatalf("status %s", env.Status)
	}
	var list messages.ApprovalListResult
	f.do(messages.OpApprovalList, "", nil, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].Status != "pending" {
		t.Fatalf("approvals: %+v", list.Approvals)
	}
	var got messages.ApprovalResult
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, &got)
	if got.Approval.Status != "granted" || got.Approval.Envelope == nil || got.Approval.Envelope.Status != messages.StatusCompleted {
		t.Fatalf("grant: %+v", got.Approval)
	}
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, nil, messages.CodeConflict)
	var cat messages.CatResult
	f.do(messages.OpCat, "a", messages.PathArgs{Path: "/ran.txt"}, &cat)
	if cat.Content == nil || *cat.Content != "ran\n" {
		t.Fatalf("granted command ran %v times", cat.Content)
	}
	f.do(messages.OpApprovalShow, "", messages.ApprovalArgs{ID: "apr-nope"}, nil, messages.CodeApprovalNotFound)
}

// A grant whose command cannot start (its directory is gone) runs
// nothing and leaves the approval pending, to be denied or granted again;
// it does not say granted.
func TestApprovalGrantThatCannotRunStaysPending(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "a", messages.VaultCreateArgs{}, nil)
	f.do(messages.OpMkdir, "a", messages.MkdirArgs{Path: "/sub"}, nil)
	env := f.exec("a", messages.ExecArgs{Shell: "git push; echo ran >> ran.txt", Cwd: "/sub"})
	if env.Status != messages.StatusApprovalRequired || env.ApprovalID == nil {
		t.Fatalf("status %s", env.Status)
	}
	f.do(messages.OpRm, "a", messages.RmArgs{Path: "/sub", Recursive: true}, nil)
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, nil, messages.CodeNotFound)
	var got messages.ApprovalResult
	f.do(messages.OpApprovalShow, "", messages.ApprovalArgs{ID: *env.ApprovalID}, &got)
	if got.Approval.Status != "pending" || got.Approval.Envelope != nil {
		t.Fatalf("after a grant that could not run: %+v", got.Approval)
	}
	f.do(messages.OpApprovalDeny, "", messages.ApprovalArgs{ID: *env.ApprovalID}, &got)
	if got.Approval.Status != "denied" {
		t.Fatalf("deny after the failed grant: %+v", got.Approval)
	}
}

// Deleting a vault denies the commands held for approval in it: granted
// later, one would run in another vault created under the same name.
func TestVaultDeleteDeniesItsApprovals(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "a", messages.VaultCreateArgs{}, nil)
	env := f.exec("a", messages.ExecArgs{Shell: "git push; echo ran >> ran.txt"})
	if env.Status != messages.StatusApprovalRequired || env.ApprovalID == nil {
		t.Fatalf("status %s", env.Status)
	}
	f.do(messages.OpVaultDelete, "a", nil, nil)
	f.do(messages.OpVaultCreate, "a", messages.VaultCreateArgs{}, nil)
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, nil, messages.CodeConflict)
	var got messages.ApprovalResult
	f.do(messages.OpApprovalShow, "", messages.ApprovalArgs{ID: *env.ApprovalID}, &got)
	if got.Approval.Status != "denied" {
		t.Fatalf("the approval of a deleted vault: %+v", got.Approval)
	}
	f.do(messages.OpCat, "a", messages.PathArgs{Path: "/ran.txt"}, nil, messages.CodeNotFound)
}

func TestApprovalExpires(t *testing.T) {
	f := newFixture(t, Config{ApprovalTTL: time.Millisecond})
	f.do(messages.OpVaultCreate, "x", messages.VaultCreateArgs{}, nil)
	env := f.exec("x", messages.ExecArgs{Argv: []string{"curl", "http://example.invalid"}})
	time.Sleep(5 * time.Millisecond) // the TTL itself, not a wait for work
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *env.ApprovalID}, nil, messages.CodeApprovalExpired)
}

func TestExecIdempotent(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "i", messages.VaultCreateArgs{}, nil)
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "i", RequestID: "same-id"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Shell: "echo x >> log.txt"})
	for i := 0; i < 2; i++ {
		if rep := f.h.Handle(context.Background(), req); rep.Error != nil {
			t.Fatal(rep.Error)
		}
	}
	var cat messages.CatResult
	f.do(messages.OpCat, "i", messages.PathArgs{Path: "/log.txt"}, &cat)
	if cat.Content == nil || *cat.Content != "x\n" {
		t.Fatalf("a repeated request id ran twice: %q", *cat.Content)
	}
}

func TestRestoreSeenThroughMount(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "r", messages.VaultCreateArgs{}, nil)
	f.write("r", "/a.txt", "one")
	f.exec("r", messages.ExecArgs{Argv: []string{"ls"}}) // mounts
	f.do(messages.OpCheckpointSave, "r", messages.CheckpointArgs{Name: "c"}, nil)
	env := f.exec("r", messages.ExecArgs{Shell: "echo two > a.txt; touch b.txt"})
	if len(env.Changes.Added) != 1 || len(env.Changes.Modified) != 1 {
		t.Fatalf("changes: %+v", env.Changes)
	}
	f.do(messages.OpCheckpointRestore, "r", messages.CheckpointArgs{Name: "c"}, nil)
	env = f.exec("r", messages.ExecArgs{Shell: "ls; cat a.txt"})
	if env.Stdout != "a.txt\none" {
		t.Fatalf("after restore the mount shows %q", env.Stdout)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func containsPrefix(l []string, p string) bool {
	for _, x := range l {
		if strings.HasPrefix(x, p) {
			return true
		}
	}
	return false
}

func TestApprovalRetryAndFinalEnvelope(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "r", messages.VaultCreateArgs{}, nil)
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "r", RequestID: "held-1", Actor: "agent"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Shell: "git push; echo ran >> ran.txt"})
	send := func() messages.Envelope {
		t.Helper()
		rep := f.h.Handle(context.Background(), req)
		if rep.Error != nil {
			t.Fatal(rep.Error)
		}
		var env messages.Envelope
		json.Unmarshal(rep.Result, &env)
		return env
	}
	first, again := send(), send()
	if first.Status != messages.StatusApprovalRequired || again.ApprovalID == nil || *again.ApprovalID != *first.ApprovalID {
		t.Fatalf("a retry held the command again: %v then %v", first.ApprovalID, again.ApprovalID)
	}
	var list messages.ApprovalListResult
	f.do(messages.OpApprovalList, "", nil, &list)
	if len(list.Approvals) != 1 {
		t.Fatalf("%d approvals for one request", len(list.Approvals))
	}
	f.do(messages.OpApprovalGrant, "", messages.ApprovalArgs{ID: *first.ApprovalID}, nil)
	if final := send(); final.Status != messages.StatusCompleted {
		t.Fatalf("after the grant the request answers %s, want the run's envelope", final.Status)
	}
	var cat messages.CatResult
	f.do(messages.OpCat, "r", messages.PathArgs{Path: "/ran.txt"}, &cat)
	if *cat.Content != "ran\n" {
		t.Fatalf("ran %q", *cat.Content)
	}
}

// TestExecSeesOtherProcessAndRemounts: a change made through another
// store handle (another process) while the vault is mounted is in the
// next command's tree, and a mount that died (unmounted from outside)
// is mounted again before the next command instead of failing it.
func TestExecSeesOtherProcessAndRemounts(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "o", messages.VaultCreateArgs{}, nil)
	f.write("o", "/a.txt", "one")
	if env := f.exec("o", messages.ExecArgs{Shell: "cat a.txt"}); env.Stdout != "one" {
		t.Fatalf("first run: %q", env.Stdout)
	}
	other, err := vault.Open(context.Background(), f.st.Path(), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Vault("default", "o").WriteFile(context.Background(), "/a.txt", []byte("two"), vault.WriteOptions{}, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	if env := f.exec("o", messages.ExecArgs{Shell: "cat a.txt"}); env.Stdout != "two" {
		t.Fatalf("after another process's write the command saw %q", env.Stdout)
	}
	env := f.exec("o", messages.ExecArgs{Shell: "pwd"})
	dir := strings.TrimSpace(env.Stdout)
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		t.Fatalf("unmount %s from outside: %v", dir, err)
	}
	env = f.exec("o", messages.ExecArgs{Shell: "cat a.txt; echo three > b.txt"})
	if env.Stdout != "two" || env.Status != messages.StatusCompleted {
		t.Fatalf("after the mount died: %+v", env)
	}
	data, _, err := f.st.Vault("default", "o").ReadFile(context.Background(), "/b.txt")
	if err != nil || string(data) != "three\n" {
		t.Fatalf("b.txt: %q, %v", data, err)
	}
}

// mounted reports whether dir is a mount point, as /proc/self/mountinfo
// lists them.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// The policy decides before the vault is mounted: a denied or held
// command costs no mount, and the next allowed command mounts as before.
func TestDeniedOrHeldCommandMountsNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "d", messages.VaultCreateArgs{}, nil)
	dir := f.r.mounts.dir("default", "d")
	for _, tc := range []struct {
		a      messages.ExecArgs
		status string
	}{
		{messages.ExecArgs{Shell: "rm -rf /etc"}, messages.StatusDenied},
		{messages.ExecArgs{Shell: "rm -rf ../x"}, messages.StatusDenied},
		{messages.ExecArgs{Argv: []string{"curl", "http://example.invalid"}}, messages.StatusApprovalRequired},
	} {
		env := f.exec("d", tc.a)
		if env.Status != tc.status {
			t.Fatalf("%v %q: status %s (rule %s), want %s", tc.a.Argv, tc.a.Shell, env.Status, env.Decision.Rule, tc.status)
		}
		if n := f.r.mounts.active(); n != 0 || mounted(t, dir) {
			t.Fatalf("%v %q (%s): %d vaults mounted, %s mounted %v; want none", tc.a.Argv, tc.a.Shell, env.Status, n, dir, mounted(t, dir))
		}
	}
	if env := f.exec("d", messages.ExecArgs{Shell: "echo hi > a.txt"}); env.Status != messages.StatusCompleted {
		t.Fatalf("an allowed command: status %s (rule %s), want completed", env.Status, env.Decision.Rule)
	}
	if n := f.r.mounts.active(); n != 1 || !mounted(t, dir) {
		t.Fatalf("after an allowed command: %d vaults mounted, %s mounted %v; want it mounted", n, dir, mounted(t, dir))
	}
}

// policy check gives the decision exec would: paths outside the vault
// are judged against a workspace, with a vault named or without.
func TestPolicyCheckJudgesPathsAsExecDoes(t *testing.T) {
	f := newFixture(t, Config{})
	f.do(messages.OpVaultCreate, "a", messages.VaultCreateArgs{}, nil)
	for _, shell := range []string{"cat /etc/shadow", "rm -rf /", "cat notes.txt"} {
		env := f.exec("a", messages.ExecArgs{Shell: shell})
		for _, vault := range []string{"a", ""} {
			var got messages.PolicyCheckResult
			f.do(messages.OpPolicyCheck, vault, messages.PolicyCheckArgs{Shell: shell}, &got)
			if got.Decision.Action != env.Decision.Action || got.Decision.Rule != env.Decision.Rule {
				t.Errorf("%q in vault %q: policy check %s (%s), exec %s (%s)", shell, vault,
					got.Decision.Action, got.Decision.Rule, env.Decision.Action, env.Decision.Rule)
			}
		}
	}
}
