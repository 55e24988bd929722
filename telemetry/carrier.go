package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// HeaderCarrier adapts NATS headers to a propagation.TextMapCarrier. Keys
// are stored lowercase whatever case the propagator asks for. It is
// declared over the map, not nats.Header, so telemetry links no NATS
// package (a nats.Header converts to it).
type HeaderCarrier map[string][]string

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value under key.
func (c HeaderCarrier) Get(key string) string {
	if vs := c[strings.ToLower(key)]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set replaces the values under key.
func (c HeaderCarrier) Set(key, value string) {
	c[strings.ToLower(key)] = []string{value}
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// propagator is the W3C trace-context propagator: stateless, so sharing
// one value is not package-level mutable state.
var propagator = propagation.TraceContext{}

// Inject writes ctx's span context into h (traceparent, tracestate).
func Inject(ctx context.Context, h map[string][]string) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context found in h, if any.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// Provider returns tp, or the no-op provider when tp is nil.
func Provider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// TraceID is the trace id of ctx's span, "" without a valid one.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Serialize encodes ctx's span context as W3C trace-context text:
// the traceparent value, then a newline and the tracestate if there is
// one. "" without a valid span context.
func Serialize(ctx context.Context) string {
	m := propagation.MapCarrier{}
	propagator.Inject(ctx, m)
	s := m.Get("traceparent")
	if s == "" {
		return ""
	}
	if ts := m.Get("tracestate"); ts != "" {
		s += "\n" + ts
	}
	return s
}

// Parse decodes what Serialize wrote; the result is invalid when s is
// empty or malformed.
func Parse(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	tp, ts, _ := strings.Cut(s, "\n")
	m := propagation.MapCarrier{"traceparent": tp}
	if ts != "" {
		m["tracestate"] = ts
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), m))
}

// Fail marks span as failed with err.
func Fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// End ends span, failed if err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		Fail(span, err)
	}
	span.End()
}
