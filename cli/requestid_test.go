package cli

import (
	"strings"
	"testing"
)

// TestRequestIDRetries runs mutating commands twice with the same
// --request-id, as an agent retrying a call whose answer it lost would:
// the second run is answered from the vault's request log and the vault
// shows one effect. In process and through a running serve.
func TestRequestIDRetries(t *testing.T) {
	for _, mode := range []string{"local", "serve"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			if mode == "serve" {
				startServe(t, e, "w-reqid")
			}
			e.ok("vault", "create", "r", "--json")
			cat := func(p string) string {
				t.Helper()
				s, _ := e.ok("cat", p, "--vault", "r", "--json")["content"].(string)
				return s
			}

			// An append applied twice would show two lines.
			for range 2 {
				e.ok("write", "/log.txt", "line\n", "--append", "--vault", "r", "--request-id", "agent-1", "--json")
			}
			if got := cat("/log.txt"); got != "line\n" {
				t.Fatalf("log after two appends with one request id = %q, want one line", got)
			}
			// The same id with other arguments is a conflict, the vault
			// unchanged.
			e.fails(1, "CONFLICT", "write", "/log.txt", "other\n", "--append", "--vault", "r", "--request-id", "agent-1", "--json")
			if got := cat("/log.txt"); got != "line\n" {
				t.Fatalf("log after a conflicting retry = %q", got)
			}

			// A write then a move, each retried: the retried move is
			// answered with its first result although /a.txt is gone.
			e.ok("write", "/a.txt", "moved\n", "--vault", "r", "--request-id", "agent-2", "--json")
			first := e.ok("mv", "/a.txt", "/b.txt", "--vault", "r", "--request-id", "agent-3", "--json")
			e.ok("write", "/a.txt", "moved\n", "--vault", "r", "--request-id", "agent-2", "--json")
			again := e.ok("mv", "/a.txt", "/b.txt", "--vault", "r", "--request-id", "agent-3", "--json")
			if again["path"] != "/b.txt" || again["from"] != first["from"] {
				t.Errorf("retried mv answered %v, first %v", again, first)
			}
			e.fails(1, "NOT_FOUND", "cat", "/a.txt", "--vault", "r", "--json")
			if got := cat("/b.txt"); got != "moved\n" {
				t.Fatalf("/b.txt = %q", got)
			}

			// AVFS_REQUEST_ID does the same as the flag.
			t.Setenv("AVFS_REQUEST_ID", "agent-4")
			for range 2 {
				e.ok("write", "/log.txt", "env\n", "--append", "--vault", "r", "--json")
			}
			t.Setenv("AVFS_REQUEST_ID", "")
			if got := cat("/log.txt"); got != "line\nenv\n" {
				t.Fatalf("log after two appends under AVFS_REQUEST_ID = %q", got)
			}

			// An exec retried with its id runs once.
			for range 2 {
				if _, errs, code := e.run("", "exec", "--vault", "r", "--request-id", "agent-5", "--json", "--", "sh", "-c", "echo ran >> runs.txt"); code != 0 {
					t.Fatalf("exec: exit %d: %s", code, errs)
				}
			}
			if got := cat("/runs.txt"); got != "ran\n" {
				t.Fatalf("runs.txt after an exec sent twice with one id = %q, want one line", got)
			}

			// Without an id every run is applied.
			for range 2 {
				e.ok("write", "/free.txt", "x", "--append", "--vault", "r", "--json")
			}
			if got := cat("/free.txt"); got != "xx" {
				t.Fatalf("appends without an id = %q", got)
			}
		})
	}
}

// TestRequestIDRefusesBadIDs: an id that could not travel in a header is
// a usage error and nothing is sent.
func TestRequestIDRefusesBadIDs(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "r", "--json")
	for _, id := range []string{"has space", "a*b", strings.Repeat("x", 129), ".dot"} {
		e.fails(2, "INVALID_ARGUMENT", "write", "/f", "x", "--vault", "r", "--request-id", id, "--json")
	}
	e.fails(1, "NOT_FOUND", "cat", "/f", "--vault", "r", "--json")
}

// TestAttemptsRetriedWithRequestID: `attempts run` sent again with the
// same --request-id makes no new forks and runs nothing again: the same
// attempts come back, each fork ran its command once.
func TestAttemptsRetriedWithRequestID(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base", "--json")
	run := func() map[string]any {
		return e.ok("attempts", "run", "--from", "base", "--count", "2", "--request-id", "att-1", "--json", "--", "sh", "-c", "echo ran >> runs.txt")
	}
	first, again := run(), run()
	names := func(r map[string]any) []string {
		var out []string
		for _, x := range r["attempts"].([]any) {
			out = append(out, x.(map[string]any)["vault"].(string))
		}
		return out
	}
	if a, b := names(first), names(again); len(a) != 2 || strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("attempts %v, then %v: want the same two", a, b)
	}
	if n := len(e.ok("vault", "list", "--json")["vaults"].([]any)); n != 3 {
		t.Fatalf("%d vaults after the retried attempts, want base and two forks", n)
	}
	for _, v := range names(first) {
		if got, _ := e.ok("cat", "/runs.txt", "--vault", v, "--json")["content"].(string); got != "ran\n" {
			t.Fatalf("%s: runs.txt = %q, want one run", v, got)
		}
	}
}
