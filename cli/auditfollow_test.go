package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuditFollowLocal(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "work")
	e.ok("vault", "create", "other")
	e.ok("vault", "use", "work")
	e.ok("write", "/old.txt", "old")

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"audit", "--follow", "--action", "file.", "--json"}, strings.NewReader(""), &out, &errb, Options{})
	}()
	// Written by other invocations (other store handles) once the
	// follower printed what was there: it finds them by polling.
	poll.Until(t, 30*time.Second, "the follower prints /old.txt", func() (bool, error) {
		return strings.Contains(out.String(), "/old.txt"), fmt.Errorf("stdout %q, stderr %q", out.String(), errb.String())
	})
	e.ok("write", "/new.txt", "new")
	e.ok("mkdir", "/d")
	e.ok("write", "/x.txt", "x", "--vault", "other")
	e.ok("write", "/new2.txt", "new")
	poll.Until(t, 30*time.Second, "the follower prints 3 events", func() (bool, error) {
		return strings.Count(out.String(), "\n") >= 3, fmt.Errorf("stdout %q", out.String())
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("audit --follow: exit %d: %s", code, errb.String())
	}
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev messages.AuditEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q is not one event: %v", line, err)
		}
		if ev.Vault != "work" || !strings.HasPrefix(ev.Action, "file.") {
			t.Fatalf("followed an event outside the filter: %+v", ev)
		}
		paths = append(paths, ev.Path)
	}
	if strings.Join(paths, " ") != "/old.txt /new.txt /new2.txt" {
		t.Fatalf("followed paths %v", paths)
	}
}
