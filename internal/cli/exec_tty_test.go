package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal is a real pseudo-terminal whose screen the test reads: avfs
// writes to the tty end as it would to a person's terminal.
type terminal struct {
	t        testing.TB
	tty      *os.File
	mu       sync.Mutex
	screen   bytes.Buffer
	readDone chan struct{}
	master   *os.File
}

func newTerminal(t testing.TB) *terminal {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	term := &terminal{t: t, tty: tty, master: master, readDone: make(chan struct{})}
	go func() {
		defer close(term.readDone)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			term.mu.Lock()
			term.screen.Write(bytes.ReplaceAll(buf[:n], []byte("\r\n"), []byte("\n")))
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { tty.Close(); master.Close(); <-term.readDone })
	return term
}

// text is everything shown so far.
func (term *terminal) text() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.screen.String()
}

// waitFor polls the screen until it matches re, or fails after 30 s.
func (term *terminal) waitFor(re string) string {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for !rx.MatchString(term.text()) {
		if time.Now().After(deadline) {
			term.t.Fatalf("terminal never showed %q; it shows:\n%s", re, term.text())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return term.text()
}

// avfs runs the command line in-process with the terminal as its stdout
// and stderr, in the background; the channel gets its exit status.
func (term *terminal) avfs(args ...string) <-chan int {
	code := make(chan int, 1)
	go func() { code <- Main(context.Background(), args, strings.NewReader(""), term.tty, term.tty, Options{}) }()
	return code
}

func TestExecStreamsOutputOnATerminal(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "x")
	gate := filepath.Join(t.TempDir(), "gate")
	term := newTerminal(t)
	// The command prints a, then waits for a file that the test creates
	// only once a is on the screen: output that came only at the end
	// could never get there.
	code := term.avfs("exec", "--vault", "x", "--", "sh", "-c", "echo a; echo warn >&2; while [ ! -e "+gate+" ]; do sleep 0.05; done; echo b")
	screen := term.waitFor(`(?m)^a\n`)
	term.waitFor(`(?m)^warn\n`)
	if strings.Contains(screen, "b\n") || strings.Contains(screen, "avfs:") {
		t.Fatalf("b or the summary shown before the command printed it:\n%s", screen)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	screen = term.waitFor(`avfs: completed, exit 0, [0-9.]+m?s, 0 files changed, checkpoint auto-\S+\n`)
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
	term := newTerminal(t)
	if c := <-term.avfs("exec", "--vault", "x", "--shell", "curl http://example.invalid"); c != 125 {
		t.Fatalf("approval required: exit %d, want 125:\n%s", c, term.text())
	}
	term.waitFor(`avfs: approval required by policy rule \S+: .+\n  to run it: avfs approval grant apr-[0-9a-f]+\n`)
	if c := <-term.avfs("exec", "--vault", "x", "--", "sudo", "ls"); c != 125 {
		t.Fatalf("denied: exit %d, want 125:\n%s", c, term.text())
	}
	term.waitFor(`avfs: denied by policy rule \S+: .+\n  see the decision: avfs policy check -- sudo ls\n`)
}
