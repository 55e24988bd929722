package runner

import (
	"context"
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
