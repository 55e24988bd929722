// Package telemetry owns avfs's OpenTelemetry plumbing: the tracer
// provider built from configuration (Setup), the W3C trace-context carrier
// over NATS headers (HeaderCarrier), and the serialization of a span
// context into the opaque string checkpoints keep (Serialize, Parse).
//
// Nothing here is global: Setup returns a provider that main passes down
// to the client, dispatcher, worker and handler through their options, so
// tests can hand them a provider backed by tracetest. A nil provider
// anywhere means the no-op one (Provider).
//
// Trace context travels in NATS headers under lowercase keys
// ("traceparent", "tracestate"): NATS headers are case-sensitive, and the
// W3C propagator reads and writes lowercase names.
package telemetry
