package cli

import (
	"context"
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
	term := terminal.Open(t)
	// a is on the screen while the command still sleeps: output that
	// came with the result would show up with b and the summary.
	code := avfsIn(term, "exec", "--vault", "x", "--", "sh", "-c", "echo a; echo warn >&2; sleep 4; echo b")
	screen := term.WaitFor(`(?m)^a\n`)
	term.WaitFor(`(?m)^warn\n`)
	select {
	case c := <-code:
		t.Fatalf("exec ended (exit %d) before a was seen:\n%s", c, term.Text())
	default:
	}
	if strings.Contains(screen, "b\n") || strings.Contains(screen, "avfs: completed") {
		t.Fatalf("b or the summary shown with a:\n%s", screen)
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
