package cli

import (
	"strings"
	"testing"
)

// Without a server nothing would outlive this process to run the
// command, so --detach is refused, and nothing runs.
func TestDetachWithoutAServerIsRefused(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	out, _, code := e.run("", "exec", "--vault", "x", "--detach", "--json", "--", "sh", "-c", "echo ran > /ran")
	if code != 125 || !strings.Contains(out, `"code":"UNAVAILABLE"`) || !strings.Contains(out, "avfs serve") {
		t.Fatalf("exit %d: %s", code, out)
	}
	e.fails(1, "NOT_FOUND", "cat", "--vault", "x", "/ran", "--json")
	if list := e.ok("run", "list", "--vault", "x"); len(list["runs"].([]any)) != 0 {
		t.Fatalf("runs after a refused detach: %v", list)
	}
}
