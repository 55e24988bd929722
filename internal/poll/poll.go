package poll

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// The intervals between checks: short first, so a condition that holds
// soon costs little, then capped, so a slow one does not spin.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 200 * time.Millisecond
)

// ErrTimeout is returned by For when the condition did not hold in time.
var ErrTimeout = errors.New("condition not met in time")

// For checks cond until it reports true, or returns an error wrapping
// ErrTimeout (and cond's last error) once timeout has passed. what names
// the condition in the error. cond's error does not stop the wait: it is
// the reason the condition does not hold yet.
func For(timeout time.Duration, what string, cond func() (bool, error)) error {
	start := time.Now()
	deadline := start.Add(timeout)
	wait := firstInterval
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("%s: waited %v: %w; last error: %w", what, time.Since(start).Round(time.Millisecond), ErrTimeout, err)
			}
			return fmt.Errorf("%s: waited %v: %w", what, time.Since(start).Round(time.Millisecond), ErrTimeout)
		}
		time.Sleep(min(wait, time.Until(deadline)))
		wait = min(2*wait, maxInterval)
	}
}

// Until is For in a test: it fails t at once (t.Fatal) when the
// condition does not hold within timeout. Call it from the test's own
// goroutine.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := For(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}
