package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/internal/poll"
)

type env struct {
	t    testing.TB
	home string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	home := t.TempDir()
	// As avfs makes a home of its own: no warning about a home others
	// can read in what the tests compare.
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AVFS_HOME", home)
	t.Setenv("AVFS_VAULT", "")
	// Local execs run in the test's process unless a test asks for the
	// exec keeper (keeper_test.go): a keeper would outlive the test.
	t.Setenv("AVFS_EXEC_KEEPER", "false")
	return &env{t: t, home: home}
}

// run executes avfs with args and returns stdout, stderr and the exit status.
func (e *env) run(stdin string, args ...string) (string, string, int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errb, Options{})
	return out.String(), errb.String(), code
}

// ok runs a command that must succeed and decodes its JSON.
func (e *env) ok(args ...string) map[string]any {
	e.t.Helper()
	out, errs, code := e.run("", args...)
	if code != 0 {
		e.t.Fatalf("avfs %v: exit %d\nstdout %s\nstderr %s", args, code, out, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		e.t.Fatalf("avfs %v: stdout is not one JSON document: %v\n%s", args, err, out)
	}
	return m
}

// fails runs a command that must fail with code and exit status.
func (e *env) fails(wantExit int, wantCode string, args ...string) map[string]any {
	e.t.Helper()
	out, _, code := e.run("", args...)
	if code != wantExit {
		e.t.Fatalf("avfs %v: exit %d, want %d\n%s", args, code, wantExit, out)
	}
	var doc struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		e.t.Fatalf("avfs %v: error output is not JSON: %v\n%s", args, err, out)
	}
	if doc.Error.Code != wantCode {
		e.t.Fatalf("avfs %v: code %q, want %q (%s)", args, doc.Error.Code, wantCode, doc.Error.Message)
	}
	return doc.Error.Details
}

func TestVaultWorkflow(t *testing.T) {
	e := newEnv(t)
	v := e.ok("vault", "create", "work", "--json")["vault"].(map[string]any)
	if v["name"] != "work" || v["namespace"] != "default" || v["parent"] != nil {
		t.Fatalf("create: %v", v)
	}
	e.ok("vault", "use", "work")
	w := e.ok("write", "/src/main.go", "package main\n", "-p")
	if w["created"] != true || w["size"] != float64(13) {
		t.Fatalf("write: %v", w)
	}
	if got := e.ok("cat", "/src/main.go", "--json")["content"]; got != "package main\n" {
		t.Fatalf("cat: %v", got)
	}
	out, _, code := e.run("piped\n", "write", "/stdin.txt")
	if code != 0 {
		t.Fatalf("write from stdin: %s", out)
	}
	e.ok("checkpoint", "save", "base", "-m", "first")
	e.ok("write", "/src/main.go", "package main // changed\n")
	e.ok("rm", "/stdin.txt")
	d := e.ok("checkpoint", "diff", "base")["changes"].(map[string]any)
	if len(d["modified"].([]any)) != 1 || len(d["deleted"].([]any)) != 1 {
		t.Fatalf("diff: %v", d)
	}
	r := e.ok("checkpoint", "restore", "base")
	if ch := r["changes"].(map[string]any); len(ch["deleted"].([]any)) != 1 {
		t.Fatalf("restore changes: %v", ch)
	}
	if got := e.ok("cat", "/stdin.txt", "--json")["content"]; got != "piped\n" {
		t.Fatalf("after restore: %v", got)
	}
	f := e.ok("vault", "fork", "work", "copy")
	if f["source"] != "work" || f["vault"].(map[string]any)["parent"] != "work" {
		t.Fatalf("fork: %v", f)
	}
	ls := e.ok("ls", "/", "-R", "--vault", "copy")["entries"].([]any)
	if len(ls) != 3 {
		t.Fatalf("ls -R of fork: %v", ls)
	}
	list := e.ok("vault", "list")["vaults"].([]any)
	if len(list) != 2 {
		t.Fatalf("list: %v", list)
	}
	ev := e.ok("audit", "--action", "checkpoint.")["events"].([]any)
	if len(ev) != 2 {
		t.Fatalf("audit checkpoint events: %v", ev)
	}
	e.ok("vault", "delete", "work", "--yes")
	if got := e.ok("cat", "/src/main.go", "--vault", "copy", "--json")["content"]; got != "package main\n" {
		t.Fatalf("fork after parent delete: %v", got)
	}
}

func TestErrorsAndExitCodes(t *testing.T) {
	e := newEnv(t)
	e.fails(1, "VAULT_NOT_FOUND", "vault", "info", "nope")
	e.ok("vault", "create", "q", "--max-file-size-mb", "1")
	e.fails(1, "VAULT_EXISTS", "vault", "create", "q")
	e.fails(1, "INVALID_PATH", "write", "--vault", "q", "/../etc/passwd", "x")
	e.fails(1, "NOT_FOUND", "cat", "--vault", "q", "/missing", "--json")
	e.fails(1, "CHECKPOINT_NOT_FOUND", "checkpoint", "restore", "nope", "--vault", "q")
	e.fails(2, "INVALID_ARGUMENT", "vault", "create")
	e.fails(2, "INVALID_ARGUMENT", "vault", "delete", "q")
	big := strings.Repeat("x", 2<<20)
	out, _, code := e.run(big, "write", "/big", "--vault", "q")
	if code != 1 || !strings.Contains(out, "QUOTA_EXCEEDED") {
		t.Fatalf("2 MiB write into a 1 MiB file quota: exit %d %s", code, out)
	}
	var doc struct {
		Error struct {
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(out), &doc)
	if doc.Error.Details["limit"] != "max_file_size_mb" || doc.Error.Details["max"] != float64(1) || doc.Error.Details["requested"] != float64(2<<20) {
		t.Fatalf("quota details: %v", doc.Error.Details)
	}
	if n := e.ok("vault", "info", "q")["vault"].(map[string]any)["files"]; n != float64(0) {
		t.Fatalf("rejected write left %v files", n)
	}
	e.fails(1, "INVALID_ARGUMENT", "write", "/x", "y") // no vault chosen
}

func TestHostImportExportAndVaultTransfer(t *testing.T) {
	e := newEnv(t)
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha", "dir/b.bin": "\x00\x01\x02", "dir/sub/c.sh": "#!/bin/sh\necho hi\n"}
	for p, c := range files {
		hp := filepath.Join(src, p)
		os.MkdirAll(filepath.Dir(hp), 0o755)
		os.WriteFile(hp, []byte(c), 0o644)
	}
	os.Chmod(filepath.Join(src, "dir/sub/c.sh"), 0o755)
	os.Symlink("a.txt", filepath.Join(src, "link"))
	e.ok("vault", "create", "t")
	imp := e.ok("import", src, "--vault", "t")
	if imp["files"] != float64(4) || imp["dirs"] != float64(2) {
		t.Fatalf("import: %v", imp)
	}
	file := filepath.Join(t.TempDir(), "t.avfs")
	e.ok("vault", "export", "t", file)
	e.ok("vault", "import", file, "t2")
	dst := t.TempDir()
	e.ok("export", "/", dst, "--vault", "t2")
	for p, c := range files {
		b, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil || string(b) != c {
			t.Fatalf("%s after round trip: %q, %v", p, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dst, "dir/sub/c.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("mode lost: %v %v", st.Mode(), err)
	}
	if tgt, err := os.Readlink(filepath.Join(dst, "link")); err != nil || tgt != "a.txt" {
		t.Fatalf("symlink: %q %v", tgt, err)
	}
}

func TestMountServesUntilUnmount(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "m")
	dir := t.TempDir()
	done := make(chan int, 1)
	go func() {
		_, _, code := e.run("", "mount", dir, "--vault", "m")
		done <- code
	}()
	poll.Until(t, 10*time.Second, "the mount comes up", func() (bool, error) { return isMountPoint(dir), nil })
	if err := os.WriteFile(filepath.Join(dir, "probe.txt"), []byte("through the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok("unmount", dir)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("avfs mount exited %d after unmount", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("avfs mount kept running after unmount")
	}
	if got := e.ok("cat", "/probe.txt", "--vault", "m", "--json")["content"]; got != "through the mount" {
		t.Fatalf("write through the mount: %v", got)
	}
}

// isMountPoint reports whether dir is on another device than its parent.
func isMountPoint(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

func TestExecExitStatuses(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	for _, tc := range []struct {
		args   []string
		exit   int
		status string
	}{
		{[]string{"--", "sh", "-c", "echo out; exit 3"}, 3, "completed"},
		{[]string{"--shell", "sudo ls"}, 125, "denied"},
		{[]string{"--shell", "curl http://example.invalid"}, 125, "approval_required"},
		{[]string{"--timeout", "300ms", "--", "sleep", "30"}, 124, "timed_out"},
		{[]string{"--", "no-such-program-avfs"}, 125, "failed_to_start"},
		{[]string{"--memory-mb", "64", "--", "python3", "-c", "b = bytearray(256 << 20)"}, 137, "limit_exceeded"},
	} {
		out, _, code := e.run("", append([]string{"exec", "--vault", "x", "--json"}, tc.args...)...)
		var env struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &env); err != nil {
			t.Fatalf("exec %v: stdout is not one envelope: %v\n%s", tc.args, err, out)
		}
		if code != tc.exit || env.Status != tc.status {
			t.Errorf("exec %v: exit %d status %s, want %d %s", tc.args, code, env.Status, tc.exit, tc.status)
		}
	}
	// A refused request is avfs's failure, not the command's: 125.
	e.fails(125, "INVALID_ARGUMENT", "exec", "--vault", "x", "--pids", "-1", "--", "true")
	e.fails(125, "VAULT_NOT_FOUND", "exec", "--vault", "nope", "--", "true")
	out, _, code := e.run("from stdin", "exec", "--vault", "x", "--stdin", "--", "cat")
	if code != 0 || !strings.Contains(out, `"stdout":"from stdin"`) {
		t.Fatalf("exec --stdin: exit %d %s", code, out)
	}
}

func TestAttemptsRun(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	e.ok("write", "/a.txt", "base", "--vault", "base")
	cmds := filepath.Join(t.TempDir(), "cmds")
	os.WriteFile(cmds, []byte("cat a.txt\nexit 1\necho x > new.txt\n"), 0o644)
	r := e.ok("attempts", "run", "--from", "base", "--commands", cmds, "--keep", "best")
	atts := r["attempts"].([]any)
	if len(atts) != 3 {
		t.Fatalf("attempts: %v", atts)
	}
	exits := []any{}
	for _, x := range atts {
		exits = append(exits, x.(map[string]any)["envelope"].(map[string]any)["exit_code"])
	}
	if exits[0] != float64(0) || exits[1] != float64(1) || exits[2] != float64(0) {
		t.Fatalf("exit codes %v", exits)
	}
	kept := r["kept"].([]any)
	if len(kept) != 1 || r["best"] != kept[0] {
		t.Fatalf("best %v kept %v", r["best"], kept)
	}
	if n := len(e.ok("vault", "list")["vaults"].([]any)); n != 2 {
		t.Fatalf("--keep best left %d vaults, want base and the best", n)
	}
	out, _, code := e.run("", "attempts", "run", "--from", "base", "--count", "2", "--json", "--", "sh", "-c", "echo hi")
	if code != 0 || strings.Count(out, `"stdout":"hi\n"`) != 2 {
		t.Fatalf("--count 2: exit %d %s", code, out)
	}
}

// A home given relative to the working directory (--home ./h) works
// for exec, whose mount point and sandbox need absolute paths.
func TestExecWithRelativeHome(t *testing.T) {
	e := newEnv(t)
	t.Chdir(t.TempDir())
	e.ok("--home", "h", "vault", "create", "x")
	out, _, code := e.run("", "--home", "h", "exec", "--vault", "x", "--json", "--", "sh", "-c", "echo hi > f")
	if code != 0 || !strings.Contains(out, `"status":"completed"`) {
		t.Fatalf("exec with --home h: exit %d\n%s", code, out)
	}
	if got := e.ok("--home", "h", "cat", "--vault", "x", "--json", "/f"); got["content"] != "hi\n" {
		t.Fatalf("cat /f after the exec: %v", got)
	}
}

// attempts run bounds itself: at most client.MaxAttempts forks in one
// run, a usage error past that with nothing forked, and --parallel
// attempts at a time (the envelopes' run times never overlap with 1).
func TestAttemptsRunBounds(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	_, _, code := e.run("", "attempts", "run", "--from", "base", "--count", fmt.Sprint(client.MaxAttempts+1), "--", "true")
	if code != 2 {
		t.Fatalf("--count %d: exit %d, want 2 (usage)", client.MaxAttempts+1, code)
	}
	if n := len(e.ok("vault", "list")["vaults"].([]any)); n != 1 {
		t.Fatalf("a refused attempts run left %d vaults, want base alone", n)
	}
	r := e.ok("attempts", "run", "--from", "base", "--count", "3", "--parallel", "1", "--keep", "none", "--", "sleep", "0.2")
	type span struct{ start, end time.Time }
	var spans []span
	for _, x := range r["attempts"].([]any) {
		env := x.(map[string]any)["envelope"].(map[string]any)
		start, err := time.Parse(time.RFC3339Nano, env["started_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, span{start, start.Add(time.Duration(env["duration_ms"].(float64)) * time.Millisecond)})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Fatalf("with --parallel 1, attempt runs overlap: %v", spans)
		}
	}
}
