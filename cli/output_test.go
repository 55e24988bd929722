package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/policy"
)

// errDoc decodes an error document, with the hint the CLI adds.
func errDoc(t *testing.T, out string) (code, msg, hint string) {
	t.Helper()
	var d struct {
		Error struct {
			Code, Message, Hint string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("not an error document: %v\n%s", err, out)
	}
	return d.Error.Code, d.Error.Message, d.Error.Hint
}

func TestUsageErrorsExitTwo(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "u")
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"vault", "creat", "x"}, `did you mean "create"`},
		{[]string{"vaul", "list"}, "unknown command"},
		{[]string{"checkpoint", "sav", "x", "--vault", "u"}, `did you mean "save"`},
		{[]string{"exec", "--vault", "u", "--timeout", "2", "--", "true"}, "--timeout"},
		{[]string{"quota", "set", "max_foo", "3", "--vault", "u"}, "quota key"},
		{[]string{"quota", "set", "max_fils", "3", "--vault", "u"}, "did you mean max_files"},
		{[]string{"quota", "set", "max_files", "abc", "--vault", "u"}, "whole number"},
		{[]string{"vault", "list", "--output", "xml"}, "--output"},
		{[]string{"vault", "list", "extra"}, "unknown command"},
		{[]string{"ls", "--bogus", "--vault", "u"}, "unknown flag"},
		{[]string{"vault", "create"}, "accepts 1 arg"},
	} {
		out, _, code := e.run("", tc.args...)
		if code != 2 {
			t.Errorf("avfs %v: exit %d, want 2\n%s", tc.args, code, out)
			continue
		}
		c, msg, _ := errDoc(t, out)
		if c != "INVALID_ARGUMENT" || !strings.Contains(msg, tc.want) {
			t.Errorf("avfs %v: %s %q, want INVALID_ARGUMENT with %q", tc.args, c, msg, tc.want)
		}
	}
	// A group alone is a request for its help, not an error.
	out, _, code := e.run("", "vault")
	if code != 0 || !strings.Contains(out, "Available Commands") {
		t.Fatalf("avfs vault: exit %d\n%s", code, out)
	}
	// A failed request is 1, as before.
	if _, _, code := e.run("", "vault", "info", "nope"); code != 1 {
		t.Fatalf("vault info nope: exit %d, want 1", code)
	}
}

func TestOutputFormats(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "fmt", "--max-files", "50")
	e.ok("write", "/a.txt", strings.Repeat("x", 3000), "--vault", "fmt")

	// --json=false: for a person, even into a pipe.
	out, _, code := e.run("", "vault", "list", "--json=false")
	if code != 0 || !strings.Contains(out, "NAME") || !strings.Contains(out, "2.9 KiB") || strings.Contains(out, "{") {
		t.Fatalf("vault list --json=false: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "just now") && !strings.Contains(out, "s ago") {
		t.Fatalf("vault list: CREATED is not an age\n%s", out)
	}
	// wide: more columns, timestamps to the second.
	out, _, _ = e.run("", "vault", "list", "-o", "wide")
	if !strings.Contains(out, "STORED") || !strings.Contains(out, "files 50") || !strings.Contains(out, "Z") {
		t.Fatalf("vault list -o wide:\n%s", out)
	}
	// yaml: the JSON document, as YAML.
	out, _, _ = e.run("", "vault", "list", "-o", "yaml")
	var y struct {
		Vaults []struct {
			Name  string
			Bytes int64
			Quota struct {
				MaxFiles *int64 `yaml:"max_files"`
			}
		}
	}
	if err := yaml.Unmarshal([]byte(out), &y); err != nil || len(y.Vaults) != 1 || y.Vaults[0].Name != "fmt" || y.Vaults[0].Bytes != 3000 ||
		y.Vaults[0].Quota.MaxFiles == nil || *y.Vaults[0].Quota.MaxFiles != 50 {
		t.Fatalf("vault list -o yaml: %v %+v\n%s", err, y, out)
	}
	// exec's document is its envelope, as YAML too; the command's exit
	// status stays the exit status.
	out, _, code = e.run("", "--vault", "fmt", "exec", "-o", "yaml", "--", "sh", "-c", "echo hi; exit 3")
	var env struct {
		Status   string
		ExitCode int `yaml:"exit_code"`
		Stdout   string
	}
	if err := yaml.Unmarshal([]byte(out), &env); err != nil || code != 3 || env.Status != "completed" || env.ExitCode != 3 || env.Stdout != "hi\n" {
		t.Fatalf("exec -o yaml: exit %d, %v %+v\n%s", code, err, env, out)
	}
	// --output wins over --json.
	out, _, _ = e.run("", "vault", "list", "--json", "-o", "table")
	if !strings.HasPrefix(out, "NAME") {
		t.Fatalf("--json -o table:\n%s", out)
	}
	// Results that used to print raw JSON for a person.
	for _, args := range [][]string{{"quota"}, {"checkpoint", "list"}, {"approval", "list"}, {"policy", "check", "--", "git", "push"}, {"config", "show"}, {"version"}} {
		out, _, code := e.run("", append([]string{"--vault", "fmt", "--json=false"}, args...)...)
		if code != 0 || strings.Contains(out, "{\"") || strings.Contains(out, "[\"") {
			t.Errorf("avfs %v --json=false: exit %d, raw JSON in\n%s", args, code, out)
		}
	}
	out, _, _ = e.run("", "quota", "--vault", "fmt", "--json=false")
	if !regexp.MustCompile(`max_files +1 +50\n`).MatchString(out) {
		t.Errorf("quota table:\n%s", out)
	}
	out, _, _ = e.run("", "config", "show", "--json=false")
	if !regexp.MustCompile(`\nexec\.timeout +5m0s\n`).MatchString(out) {
		t.Errorf("config show: exec.timeout is not a duration\n%s", out)
	}
	if got := e.ok("config", "show")["config"].(map[string]any)["exec.timeout"]; got != "5m0s" {
		t.Errorf("config show JSON: exec.timeout = %v, want 5m0s", got)
	}
}

func TestCatWritesBytes(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "c")
	bin := "\x00\x01\xffbinary\n"
	if _, _, code := e.run(bin, "write", "/b.bin", "--vault", "c"); code != 0 {
		t.Fatal("write")
	}
	out, errs, code := e.run("", "cat", "/b.bin", "--vault", "c")
	if code != 0 || out != bin {
		t.Fatalf("cat into a pipe: exit %d %q (stderr %s)", code, out, errs)
	}
	doc := e.ok("cat", "/b.bin", "--vault", "c", "--json")
	if doc["content_base64"] == nil || doc["size"] != float64(len(bin)) {
		t.Fatalf("cat --json: %v", doc)
	}
	if out, _, _ := e.run("", "cat", "/b.bin", "--vault", "c", "--json", "--raw"); out != bin {
		t.Fatalf("cat --json --raw: %q", out)
	}
	// An error in raw mode goes to stderr, never into the copy.
	out, errs, code = e.run("", "cat", "/missing", "--vault", "c")
	if code != 1 || out != "" || !strings.Contains(errs, "no such file") || !strings.Contains(errs, "hint: ") {
		t.Fatalf("cat /missing: exit %d stdout %q stderr %q", code, out, errs)
	}
}

func TestRestoreSaysWhatItRemovedAndBroughtBack(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "r")
	e.ok("vault", "use", "r")
	e.ok("write", "/keep.txt", "v1")
	e.ok("write", "/gone.txt", "back")
	e.ok("checkpoint", "save", "base")
	e.ok("rm", "/gone.txt")
	e.ok("write", "/keep.txt", "v2")
	for i := range 12 {
		e.ok("write", fmt.Sprintf("/z%02d", i), "x")
	}
	for i := range 3 {
		e.ok("write", fmt.Sprintf("/target/debug/f%d", i), "xyz", "-p")
	}
	out, _, code := e.run("", "checkpoint", "restore", "base", "--json=false")
	if code != 0 {
		t.Fatalf("restore: %d %s", code, out)
	}
	for _, want := range []string{"restored checkpoint base", "-  /z00", "+  /gone.txt", "~  /keep.txt", "… and 3 more removed",
		"removed 17, reverted 1, brought back 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/z11") {
		t.Errorf("narrow restore output lists every removed path:\n%s", out)
	}
	if !regexp.MustCompile(`-  /target/ \(4 entries\) +9 B\n`).MatchString(out) {
		t.Errorf("narrow restore output does not fold /target into one line:\n%s", out)
	}
	// The same restore again, as JSON, names its direction.
	e.ok("write", "/new.txt", "x")
	r := e.ok("checkpoint", "restore", "base")
	if r["direction"] != "undone" || len(r["changes"].(map[string]any)["added"].([]any)) != 1 {
		t.Fatalf("restore JSON: %v", r)
	}
	e.ok("write", "/new.txt", "x")
	for i := range 12 {
		e.ok("write", fmt.Sprintf("/t/f%02d", i), "x", "-p")
	}
	out, _, _ = e.run("", "checkpoint", "restore", "base", "-o", "wide")
	if !strings.Contains(out, "/t/f11") {
		t.Errorf("restore -o wide does not list every path:\n%s", out)
	}
}

func TestErrorsSayTheNextCommand(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "h", "--max-files", "2")
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{[]string{"write", "rel.txt", "x"}, "vault paths start with /"},
		{[]string{"write", "/a/b.txt", "x"}, "use -p"},
		{[]string{"mkdir", "/q/r"}, "use -p"},
		{[]string{"vault", "info", "nope"}, "avfs vault create nope"},
		{[]string{"ls", "--vault", "nope"}, "avfs vault list"},
		{[]string{"checkpoint", "restore", "nope"}, "avfs checkpoint list"},
		{[]string{"approval", "grant", "apr-nope"}, "avfs approval list"},
	} {
		args := tc.args
		if args[0] != "vault" && !strings.Contains(strings.Join(args, " "), "--vault") {
			args = append(args, "--vault", "h")
		}
		out, _, code := e.run("", args...)
		if code == 0 {
			t.Errorf("avfs %v succeeded", args)
			continue
		}
		if _, _, hint := errDoc(t, out); !strings.Contains(hint, tc.hint) {
			t.Errorf("avfs %v: hint %q, want %q", args, hint, tc.hint)
		}
	}
	// UNAVAILABLE points at the fleet only when there is one to point at.
	out, _, _ := e.run("", "--vault", "h", "mount", filepath.Join(t.TempDir(), "missing"))
	if code, _, hint := errDoc(t, out); code != "UNAVAILABLE" || strings.Contains(hint, "fleet") {
		t.Errorf("local mount of a missing directory: %s, hint %q", code, hint)
	}
	out, _, _ = e.run("", "--nats", "nats://127.0.0.1:1", "vault", "list")
	if code, _, hint := errDoc(t, out); code != "UNAVAILABLE" || !strings.Contains(hint, "fleet") {
		t.Errorf("an unreachable fleet: %s, hint %q", code, hint)
	}
	// NOT_EMPTY: rm may suggest -r; mv onto a directory with entries
	// must not suggest deleting them.
	e.ok("vault", "create", "m")
	e.ok("--vault", "m", "mkdir", "/e")
	e.ok("--vault", "m", "write", "-p", "/full/x", "x")
	out, _, _ = e.run("", "--vault", "m", "mv", "/e", "/full")
	if _, _, hint := errDoc(t, out); strings.Contains(hint, "rm") || !strings.Contains(hint, "inside it") {
		t.Errorf("mv onto a directory with entries: hint %q", hint)
	}
	out, _, _ = e.run("", "--vault", "m", "rm", "/full")
	if _, _, hint := errDoc(t, out); !strings.Contains(hint, "avfs rm -r /full") {
		t.Errorf("rm of a directory with entries: hint %q", hint)
	}
	e.ok("write", "/1", "x", "--vault", "h")
	e.ok("write", "/2", "x", "--vault", "h")
	out, _, _ = e.run("", "write", "/3", "x", "--vault", "h")
	if _, _, hint := errDoc(t, out); !strings.Contains(hint, "avfs quota set max_files") {
		t.Errorf("quota hint: %q", hint)
	}
	// For a person: message and hint on stderr, nothing on stdout.
	out, errs, _ := e.run("", "write", "rel", "x", "--vault", "h", "--json=false")
	if out != "" || !strings.Contains(errs, "hint: vault paths start with /") {
		t.Errorf("person's error: stdout %q stderr %q", out, errs)
	}
	// A held command says how to grant it.
	out, _, _ = e.run("", "exec", "--vault", "h", "--json", "--shell", "curl http://example.invalid")
	var env messages.Envelope
	json.Unmarshal([]byte(out), &env)
	if hint := EnvelopeHint(env); !strings.Contains(hint, "avfs approval grant "+deref(env.ApprovalID)) || env.ApprovalID == nil {
		t.Errorf("approval hint: %q", hint)
	}
}

func TestConfigChecked(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(e.home, "avfs.yaml")
	for _, tc := range []struct{ yaml, want string }{
		{"exec:\n  timout: 10s\n", "did you mean exec.timeout?"},
		{"nats:\n  replica: 3\n", "did you mean nats.replicas?"},
		{"policy:\n  rules:\n    - name: ok\n      programs: [ls]\n      action: allow\n    - name: fetch\n      program: [curl]\n      action: deny\n",
			`policy.rules[1] ("fetch"): unknown field "program" (did you mean "programs"?)`},
		{"policy:\n  rules:\n    - name: fetch\n      programs: [curl]\n      action: maybe\n", `policy.rules[0] ("fetch"): field action`},
	} {
		os.WriteFile(cfg, []byte(tc.yaml), 0o644)
		out, _, code := e.run("", "vault", "list")
		if code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", tc.yaml, code, out)
			continue
		}
		if _, msg, hint := errDoc(t, out); !strings.Contains(msg, tc.want) || !strings.Contains(hint, "config show") {
			t.Errorf("%q: %q (hint %q), want %q", tc.yaml, msg, hint, tc.want)
		}
	}
	// Free sub-keys of a map, and known keys, pass.
	os.WriteFile(cfg, []byte("exec:\n  timeout: 10s\ntelemetry:\n  headers:\n    authorization: x\n"), 0o644)
	if got := e.ok("config", "show")["config"].(map[string]any)["exec.timeout"]; got != "10s" {
		t.Fatalf("exec.timeout from the file: %v", got)
	}
}

func TestPolicyShow(t *testing.T) {
	e := newEnv(t)
	doc := e.ok("policy", "show")
	rules := doc["rules"].([]any)
	if doc["source"] != "default" || len(rules) != len(policy.DefaultRules()) || doc["fallback"] != "allow_with_checkpoint" {
		t.Fatalf("policy show: source %v, %d rules, fallback %v", doc["source"], len(rules), doc["fallback"])
	}
	if r := rules[0].(map[string]any); r["name"] != policy.DefaultRules()[0].Name || r["action"] != "deny" {
		t.Fatalf("first rule: %v", r)
	}
	out, _, _ := e.run("", "policy", "show", "--json=false")
	if !strings.Contains(out, "git-network") || !strings.Contains(out, "require_approval") || !strings.Contains(out, "built-in") {
		t.Fatalf("policy show table:\n%s", out)
	}
	os.WriteFile(filepath.Join(e.home, "avfs.yaml"), []byte("policy:\n  fallback: deny\n  rules:\n    - name: only-ls\n      programs: [ls]\n      action: allow\n"), 0o644)
	doc = e.ok("policy", "show")
	if doc["source"] != "config" || len(doc["rules"].([]any)) != 1 || doc["fallback"] != "deny" {
		t.Fatalf("configured policy: %v", doc)
	}
}

func TestProgressOnStderr(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "p")
	src := t.TempDir()
	for i := range 30 {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), []byte(strings.Repeat("y", 1000)), 0o644)
	}
	out, errs, code := e.run("", "import", src, "/in", "--vault", "p")
	if code != 0 {
		t.Fatalf("import: %d %s %s", code, out, errs)
	}
	if strings.Contains(errs, "\r") || strings.Count(errs, "import 30/30 files, 29 KiB of 29 KiB") != 1 {
		t.Fatalf("import progress into a pipe, its last line once: %q", errs)
	}
	if json.Unmarshal([]byte(out), new(map[string]any)) != nil {
		t.Fatalf("stdout is not one document: %q", out)
	}
	_, errs, _ = e.run("", "export", "/", t.TempDir(), "--vault", "p", "--quiet")
	if errs != "" {
		t.Fatalf("export --quiet wrote %q", errs)
	}
	_, errs, _ = e.run("", "export", "/", t.TempDir(), "--vault", "p")
	if !strings.Contains(errs, "export 30/30 files") {
		t.Fatalf("export progress: %q", errs)
	}
}

// complete asks avfs for completions as the shell scripts do (`avfs
// __complete ARGS... PREFIX`) and returns the candidates, without their
// descriptions.
func (e *env) complete(args ...string) []string {
	e.t.Helper()
	out, errs, code := e.run("", append([]string{"__complete"}, args...)...)
	if code != 0 {
		e.t.Fatalf("__complete %v: exit %d %s", args, code, errs)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, ":") || line == "" {
			continue
		}
		name, _, _ := strings.Cut(line, "\t")
		got = append(got, name)
	}
	return got
}

// completionFixture: vaults alpha and beta, alpha holding /src/main.go
// and /README, with checkpoints before-refactor and v2.
func completionFixture(e *env) {
	e.ok("vault", "create", "alpha")
	e.ok("vault", "create", "beta")
	e.ok("write", "/src/main.go", "package main\n", "-p", "--vault", "alpha")
	e.ok("write", "/README", "x", "--vault", "alpha")
	e.ok("checkpoint", "save", "before-refactor", "--vault", "alpha")
	e.ok("checkpoint", "save", "v2", "--vault", "alpha")
}

func TestCompletion(t *testing.T) {
	e := newEnv(t)
	completionFixture(e)
	out, _, _ := e.run("", "exec", "--vault", "alpha", "--json", "--shell", "curl http://example.invalid")
	var env messages.Envelope
	json.Unmarshal([]byte(out), &env)
	if env.ApprovalID == nil {
		t.Fatalf("no approval: %s", out)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"vault", "info", ""}, []string{"alpha", "beta"}},
		{[]string{"vault", "fork", "a"}, []string{"alpha"}},
		{[]string{"ls", "--vault", ""}, []string{"alpha", "beta"}},
		{[]string{"attempts", "run", "--from", "b"}, []string{"beta"}},
		{[]string{"checkpoint", "restore", "--vault", "alpha", ""}, []string{"before-refactor", "v2"}},
		{[]string{"checkpoint", "diff", "--vault", "alpha", "v2", "b"}, []string{"before-refactor"}},
		{[]string{"vault", "fork", "alpha", "new", "--checkpoint", ""}, []string{"before-refactor", "v2"}},
		{[]string{"cat", "--vault", "alpha", ""}, []string{"/"}},
		{[]string{"cat", "--vault", "alpha", "/"}, []string{"/README", "/src/"}},
		{[]string{"rm", "--vault", "alpha", "/src/m"}, []string{"/src/main.go"}},
		{[]string{"exec", "--vault", "alpha", "--cwd", "/"}, []string{"/src/"}},
		{[]string{"approval", "grant", ""}, []string{*env.ApprovalID}},
		{[]string{"vault", "list", "--output", ""}, outputFormats},
		{[]string{"exec", "--checkpoint", ""}, []string{"auto", "always", "never"}},
		{[]string{"vault", "fork", "alpha", "x", "--placement", ""}, []string{"source", "spread"}},
		{[]string{"attempts", "run", "--keep", ""}, []string{"best", "all", "none"}},
		{[]string{"quota", "set", ""}, quotaKeys},
		{[]string{"audit", "--action", "checkpoint.r"}, []string{"checkpoint.restore"}},
	} {
		got := e.complete(tc.args...)
		prefix := tc.args[len(tc.args)-1]
		var filtered []string
		for _, g := range got {
			if strings.HasPrefix(g, prefix) {
				filtered = append(filtered, g)
			}
		}
		if strings.Join(filtered, " ") != strings.Join(tc.want, " ") {
			t.Errorf("complete %v: %v, want %v", tc.args, filtered, tc.want)
		}
	}
	// A broken config file: no candidates, and no error among them.
	os.WriteFile(filepath.Join(e.home, "avfs.yaml"), []byte("exec:\n  timout: 1s\n"), 0o644)
	if out, _, code := e.run("", "__complete", "vault", "info", ""); code != 0 || strings.Contains(out, "error") {
		t.Errorf("completion with a broken config: exit %d\n%s", code, out)
	}
	// Nothing to complete from, nothing created: a fresh home stays empty.
	fresh := t.TempDir()
	t.Setenv("AVFS_HOME", fresh)
	if got := e.complete("vault", "info", ""); len(got) != 0 {
		t.Errorf("completion on an empty home: %v", got)
	}
	if ents, _ := os.ReadDir(fresh); len(ents) != 0 {
		t.Errorf("completion created %v in a fresh home", ents)
	}
}

func TestCompletionThroughServe(t *testing.T) {
	e := newEnv(t)
	startServe(t, e, "w-complete")
	e.ok("vault", "create", "through-serve")
	if got := e.complete("vault", "info", "thr"); strings.Join(got, " ") != "through-serve" {
		t.Errorf("vault names through serve: %v", got)
	}
	// The worker's heartbeat may take a moment to land.
	poll.Until(t, 20*time.Second, "worker ids complete", func() (bool, error) {
		got := e.complete("worker", "--id", "w-")
		return strings.Join(got, " ") == "w-complete", fmt.Errorf("worker ids: %v", got)
	})
	out, _, code := e.run("", "fleet", "status", "--json=false")
	if code != 0 || !regexp.MustCompile(`WORKER +VAULTS +RUNNING EXECS +LOAD +LAST SEEN\nw-complete +\d+ +0 +`).MatchString(out) || !strings.Contains(out, "1 dispatcher(s)") {
		t.Errorf("fleet status (exit %d):\n%s", code, out)
	}
}

// Names are the vault's, an agent's: listed for a person, their control
// characters are spelled out, so that none drives the terminal, and a
// name with a newline stays on one line.
func TestListingsEscapeControlCharacters(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	e.ok("--vault", "x", "write", "/\x1b[31mred", "a")
	e.ok("--vault", "x", "write", "/new\nline", "b")
	e.ok("--vault", "x", "write", "/c1\u009b2J", "c") // CSI as one C1 character
	for _, args := range [][]string{{"ls", "/"}, {"ls", "-l", "/"}, {"tree", "/"}} {
		out, _, code := e.run("", append([]string{"--vault", "x", "--json=false"}, args...)...)
		if code != 0 || strings.ContainsAny(out, "\x1b\u009b") || !strings.Contains(out, `\x1b[31mred`) || !strings.Contains(out, `c1\u009b2J`) {
			t.Errorf("%v: exit %d, escape not spelled out:\n%q", args, code, out)
		}
	}
	out, _, _ := e.run("", "--vault", "x", "--json=false", "ls", "/")
	if !strings.Contains(out, `"new\nline"`) {
		t.Errorf("ls: the name with a newline is not one quoted line:\n%q", out)
	}
	// JSON keeps the names as they are.
	if out, _, _ := e.run("", "--vault", "x", "--json", "ls", "/"); !strings.Contains(out, `\u001b[31mred`) {
		t.Errorf("ls --json: %s", out)
	}
}
