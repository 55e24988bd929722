package worker

import (
	"context"
	"testing"
	"time"

	"github.com/avfs/avfs/handler"
)

// TestProgressTouchesWhileTheCallRuns: the progress wrapper tells the
// delivery the request is alive for as long as the core runs, and the
// NoProgress fault takes that away.
func TestProgressTouchesWhileTheCallRuns(t *testing.T) {
	ctx := context.Background()
	touched := make(chan struct{}, 64)
	touch := func() error {
		select {
		case touched <- struct{}{}:
		default:
		}
		return nil
	}
	release := make(chan struct{})
	p := progress{every: 5 * time.Millisecond, next: handler.CoreFunc(func(context.Context, handler.Call) (any, error) {
		<-release
		return "ok", nil
	})}
	done := make(chan any)
	go func() {
		res, _ := p.Serve(withTouch(ctx, touch), handler.Call{})
		done <- res
	}()
	for i := range 2 {
		select {
		case <-touched:
		case <-time.After(10 * time.Second):
			t.Fatalf("touch %d never came while the call ran", i+1)
		}
	}
	close(release)
	if res := <-done; res != "ok" {
		t.Fatalf("result through progress: got %v, want ok", res)
	}

	var seen func() error
	faulty := NoProgress(handler.CoreFunc(func(ctx context.Context, _ handler.Call) (any, error) {
		seen, _ = ctx.Value(touchKey{}).(func() error)
		return nil, nil
	}))
	faulty.Serve(withTouch(ctx, touch), handler.Call{})
	if seen != nil {
		t.Fatal("NoProgress left the delivery's touch in place")
	}
}
