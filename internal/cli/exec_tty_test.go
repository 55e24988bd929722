package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/avfs/avfs/internal/terminal"
)

// avfsIn runs the command line in-process with the terminal as its stdout
// and stderr, in the background; the channel gets its exit status.
func avfsIn(term *terminal.Terminal, args ...string) <-chan int {
	code := make(chan int, 1)
	go func() { code <- Main(context.Background(), args, strings.NewReader(""), term.TTY, term.TTY, Options{}) }()
	return code
}

func TestExecStreamsOutputOnATerminal(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	gate := filepath.Join(t.TempDir(), "gate")
	term := terminal.Open(t)
	// The command prints a, then waits for a file that the test creates
	// only once a is on the screen: output that came only at the end
	// could never get there.
	code := avfsIn(term, "exec", "--vault", "x", "--", "sh", "-c", "echo a; echo warn >&2; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo b")
	screen := term.WaitFor(`(?m)^a\n`)
	term.WaitFor(`(?m)^warn\n`)
	if strings.Contains(screen, "b\n") || strings.Contains(screen, "avfs:") {
		t.Fatalf("b or the summary shown before the command printed it:\n%s", screen)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	screen = term.WaitFor(`avfs: completed, exit 0, [0-9.]+m?s, 0 files changed, checkpoint auto-\S+\n`)
	if c := <-code; c != 0 {
		t.Fatalf("exit %d:\n%s", c, screen)
	}
	if !regexp.MustCompile(`(?m)^a\n(warn\n)?(.*\n)*b\navfs: completed`).MatchString(screen) {
		t.Fatalf("want a, b, then the summary:\n%s", screen)
	}
	if strings.Contains(screen, `"schema"`) {
		t.Fatalf("the envelope was printed on a terminal:\n%s", screen)
	}
}

func TestExecRefusalsOnATerminalSayWhatToDo(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	term := terminal.Open(t)
	if c := <-avfsIn(term, "exec", "--vault", "x", "--shell", "curl http://example.invalid"); c != 125 {
		t.Fatalf("approval required: exit %d, want 125:\n%s", c, term.Text())
	}
	term.WaitFor(`avfs: approval required by policy rule \S+: .+\n  to run it: avfs approval grant apr-[0-9a-f]+\n`)
	if c := <-avfsIn(term, "exec", "--vault", "x", "--", "sudo", "ls"); c != 125 {
		t.Fatalf("denied: exit %d, want 125:\n%s", c, term.Text())
	}
	term.WaitFor(`avfs: denied by policy rule \S+: .+\n  see the decision: avfs policy check -- sudo ls\n`)
}
