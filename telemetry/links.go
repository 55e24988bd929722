package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

type linksKey struct{}

// WithLinks returns ctx asking the next span a client starts for a
// request (the send span) to link to links, on top of any ctx already
// carries: an attempt's exec links to the fork it runs in. Links that are
// not valid are dropped.
func WithLinks(ctx context.Context, links ...trace.Link) context.Context {
	all := append([]trace.Link(nil), LinksFrom(ctx)...)
	for _, l := range links {
		if l.SpanContext.IsValid() {
			all = append(all, l)
		}
	}
	return context.WithValue(ctx, linksKey{}, all)
}

// LinksFrom returns the links WithLinks put in ctx.
func LinksFrom(ctx context.Context) []trace.Link {
	ls, _ := ctx.Value(linksKey{}).([]trace.Link)
	return ls
}

// WithoutLinks returns ctx with no links for the next span, so that the
// spans below the one that used them do not inherit them.
func WithoutLinks(ctx context.Context) context.Context {
	if LinksFrom(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, linksKey{}, []trace.Link(nil))
}

type spanSinkKey struct{}

// RecordSpan returns ctx asking the client to store the span context of
// the send span it starts for a request into *sc, so the caller can link
// later requests to it (an attempt's exec to its fork).
func RecordSpan(ctx context.Context, sc *trace.SpanContext) context.Context {
	return context.WithValue(ctx, spanSinkKey{}, sc)
}

// NoteSpan stores sc where RecordSpan asked, if it did.
func NoteSpan(ctx context.Context, sc trace.SpanContext) {
	if p, ok := ctx.Value(spanSinkKey{}).(*trace.SpanContext); ok && p != nil {
		*p = sc
	}
}
