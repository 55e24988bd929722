package worker

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/messages"
)

// OutputFunc receives a command's output as the command writes it:
// stream is messages.StreamStdout or StreamStderr. It is called from two
// goroutines at once (one per stream) and must not keep p. A slow
// OutputFunc slows the command, whose pipe fills.
type OutputFunc func(stream string, p []byte)

type outputKey struct{}

// WithOutput returns a context under which an exec.run calls fn with the
// command's output while it runs. The envelope still carries the capped
// output; fn sees all of it.
func WithOutput(ctx context.Context, fn OutputFunc) context.Context {
	return context.WithValue(ctx, outputKey{}, fn)
}

func outputFrom(ctx context.Context) OutputFunc {
	fn, _ := ctx.Value(outputKey{}).(OutputFunc)
	return fn
}

// streamWriter adapts one stream of an OutputFunc to the io.Writer that
// exec.Spec tees into.
type streamWriter struct {
	fn     OutputFunc
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.fn(w.stream, p)
	return len(p), nil
}

// publishOutput returns the OutputFunc that publishes a request's output
// to the caller's inbox (messages.HeaderOutputTo) as OutputChunk
// messages numbered from 1. Core NATS keeps one publisher's messages in
// order, and the Reply goes out on the same connection after the last
// chunk, so a caller subscribed to both sees every chunk before it.
func publishOutput(nc *nats.Conn, to string, req messages.Request, attempt int) OutputFunc {
	var mu sync.Mutex
	var seq int64
	return func(stream string, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		seq++
		b, err := json.Marshal(messages.OutputChunk{Seq: seq, Stream: stream, Data: p, RequestID: req.RequestID, Attempt: attempt})
		if err != nil {
			return
		}
		// Best effort: the envelope is the record; a lost chunk shows as
		// a gap in seq.
		_ = nc.Publish(to, b)
	}
}
