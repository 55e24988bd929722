// Package terminal gives tests a real pseudo-terminal to run the avfs
// command line in, and reads back what a person would see on it. It is
// for tests only: it fails the test it is given.
package terminal

import (
	"bytes"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// Terminal is a pty: programs write to TTY as to a person's terminal, and
// Text is the screen so far, with the terminal's \r\n turned back into \n.
type Terminal struct {
	// TTY is the terminal end to give a program as stdout and stderr.
	TTY *os.File

	t      testing.TB
	master *os.File
	mu     sync.Mutex
	screen bytes.Buffer
	done   chan struct{}
}

// Open opens a pty that is closed when the test ends.
func Open(t testing.TB) *Terminal {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	term := &Terminal{TTY: tty, t: t, master: master, done: make(chan struct{})}
	go func() {
		defer close(term.done)
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
	t.Cleanup(func() { tty.Close(); master.Close(); <-term.done })
	return term
}

// Text is everything shown so far.
func (term *Terminal) Text() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.screen.String()
}

// WaitFor polls the screen until it matches the regular expression re
// and returns it, or fails the test after 30 s.
func (term *Terminal) WaitFor(re string) string {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for !rx.MatchString(term.Text()) {
		if time.Now().After(deadline) {
			term.t.Fatalf("terminal never showed %q; it shows:\n%s", re, term.Text())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return term.Text()
}
