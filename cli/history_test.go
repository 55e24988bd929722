package cli

import (
	"strings"
	"testing"
)

func TestFileHistoryCommands(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "h")
	t.Setenv("AVFS_VAULT", "h")
	e.ok("write", "/f.txt", "a\nb\nc\n")
	e.ok("write", "/f.txt", "a\nB\nc\nd\n")
	vs := e.ok("log", "/f.txt", "--json")["versions"].([]any)
	if len(vs) != 2 {
		t.Fatalf("log: %v, want 2 versions", vs)
	}
	v1 := vs[0].(map[string]any)
	for _, k := range []string{"version", "size", "created_at", "hash"} {
		if _, ok := v1[k]; !ok {
			t.Fatalf("log entry %v lacks %q", v1, k)
		}
	}
	if got := e.ok("log", "/f.txt", "-n", "1")["versions"].([]any); len(got) != 1 || got[0].(map[string]any)["version"] != float64(2) {
		t.Fatalf("log -n 1: %v", got)
	}
	if c := e.ok("cat", "/f.txt", "-v", "1", "--json"); c["content"] != "a\nb\nc\n" || c["version"] != float64(1) {
		t.Fatalf("cat -v 1 --json: %v", c)
	}
	// Without --json, into a pipe, the version's bytes, as cat writes a
	// file's; its errors as text on stderr.
	if out, errs, code := e.run("", "cat", "/f.txt", "-v", "1"); code != 0 || out != "a\nb\nc\n" || errs != "" {
		t.Fatalf("cat -v 1: exit %d stdout %q stderr %q", code, out, errs)
	}
	if out, errs, code := e.run("", "cat", "/f.txt", "-v", "99"); code != 1 || out != "" || !strings.Contains(errs, "NOT_FOUND") && !strings.Contains(errs, "99") {
		t.Fatalf("cat -v 99: exit %d stdout %q stderr %q", code, out, errs)
	}
	d := e.ok("diff", "/f.txt")
	if want := "--- /f.txt@v1\n+++ /f.txt\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\n"; d["diff"] != want {
		t.Fatalf("diff: %q, want %q", d["diff"], want)
	}
	e.ok("write", "/bin.dat", "\x00\x01")
	if d := e.ok("diff", "/f.txt", "/bin.dat"); d["binary"] != true || d["diff"] != "" {
		t.Fatalf("diff with a binary file: %v", d)
	}
	e.ok("revert", "/f.txt")
	if c := e.ok("cat", "/f.txt", "--json"); c["content"] != "a\nb\nc\n" {
		t.Fatalf("after revert: %v", c)
	}
	e.ok("checkout", "/f.txt", "-v", "2")
	if c := e.ok("cat", "/f.txt", "--json"); c["content"] != "a\nB\nc\nd\n" {
		t.Fatalf("after checkout -v 2: %v", c)
	}
	if p := e.ok("prune", "--keep", "1", "--dry-run"); p["versions"] != float64(3) || p["dry_run"] != true {
		t.Fatalf("prune --dry-run: %v", p)
	}
	e.ok("prune", "--keep", "1")
	if got := e.ok("log", "/f.txt")["versions"].([]any); len(got) != 1 {
		t.Fatalf("after prune --keep 1: %v", got)
	}
	if h := e.ok("history", "set", "--keep", "5", "--coalesce", "2s")["history"].(map[string]any); h["keep"] != float64(5) || h["coalesce"] != "2s" {
		t.Fatalf("history set: %v", h)
	}
	e.fails(1, "NOT_FOUND", "cat", "/f.txt", "-v", "99", "--json")
	e.fails(1, "INVALID_ARGUMENT", "prune", "--json")
	out, _, code := e.run("", "log", "--help")
	if code != 0 || !strings.Contains(out, "avfs log /src/main.go") {
		t.Fatalf("log --help: exit %d, no example:\n%s", code, out)
	}
}
