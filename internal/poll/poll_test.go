package poll

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	err := For(10*time.Second, "third check", func() (bool, error) { return n.Add(1) >= 3, nil })
	if err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("checked %d times, want 3", got)
	}
}

func TestForTimesOutWithTheLastError(t *testing.T) {
	cause := errors.New("not there yet")
	err := For(50*time.Millisecond, "the file", func() (bool, error) { return false, cause })
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, cause) {
		t.Fatalf("got %v, want ErrTimeout wrapping the last error", err)
	}
	if !strings.Contains(err.Error(), "the file") {
		t.Fatalf("error %q does not name what was awaited", err)
	}
}

func TestForChecksAtLeastOnceAfterTheDeadline(t *testing.T) {
	calls := 0
	err := For(0, "at once", func() (bool, error) { calls++; return true, nil })
	if err != nil || calls != 1 {
		t.Fatalf("got %v after %d calls, want nil after 1", err, calls)
	}
}
