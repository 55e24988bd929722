package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys added to records logged with a context that carries a span.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// Log keys of the fleet's records (worker, dispatcher, CLI), one spelling
// each so that a log search for a vault or an error finds every line.
// The leaves (vault, mount, exec) keep their own few keys: they import
// nothing of ours.
const (
	LogKeyErr       = "err"
	LogKeyVault     = "vault"
	LogKeyNamespace = "namespace"
	LogKeyWorker    = "worker"
	LogKeyRequest   = "request"
	LogKeyEpoch     = "epoch"
)

// LogHandler wraps h so that every record logged with a context carrying
// a span (logger.InfoContext(ctx, ...)) gets its trace and span ids, and a
// log line can be found from its trace and back.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
