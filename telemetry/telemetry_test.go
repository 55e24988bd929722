package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestHeaderCarrierRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	h := nats.Header{}
	Inject(ctx, h)
	if h.Get("traceparent") == "" || h.Get("Traceparent") != "" {
		t.Fatalf("headers %v: want a lowercase traceparent", h)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want %v", got, span.SpanContext())
	}
	if p := Parse(Serialize(ctx)); !p.Equal(got) {
		t.Fatalf("serialized round trip: got %v, want %v", p, got)
	}
	if Serialize(context.Background()) != "" || Parse("").IsValid() || Parse("junk").IsValid() {
		t.Fatal("an empty span context must serialize to \"\" and back to invalid")
	}
}

func TestSetupNoneIsNoop(t *testing.T) {
	tp, shutdown, err := Setup(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	if span.SpanContext().IsValid() {
		t.Fatal("the none exporter recorded a span")
	}
	if _, _, err := Setup(context.Background(), Config{Exporter: "zipkin"}); err == nil {
		t.Fatal("an unknown exporter was accepted")
	}
}

func TestSetupOTLPHTTP(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	tp, shutdown, err := Setup(context.Background(), Config{Exporter: ExporterOTLPHTTP, Endpoint: "127.0.0.1:1", Insecure: true, ServiceName: "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	_ = shutdown // exporting to a closed port would only time out
	sdk, ok := tp.(*sdktrace.TracerProvider)
	if !ok {
		t.Fatalf("provider %T", tp)
	}
	_, span := sdk.Tracer("t").Start(context.Background(), "s")
	ro := span.(sdktrace.ReadOnlySpan)
	for _, kv := range ro.Resource().Attributes() {
		if kv.Key == "service.name" && kv.Value.AsString() != "from-env" {
			t.Fatalf("service.name %q, want OTEL_SERVICE_NAME to win", kv.Value.AsString())
		}
	}
	span.End()
}

func TestStandardEnvSwitchesExportOn(t *testing.T) {
	for _, tc := range []struct {
		exporter, endpoint, protocol string
		sdk                          bool
	}{
		{"", "", "", false},
		{"", "http://127.0.0.1:4318", "", true},
		{"", "127.0.0.1:4317", "grpc", true},
		{"otlp-grpc", "", "", true},
		{"none", "http://127.0.0.1:4318", "", false},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
		tp, shutdown, err := Setup(context.Background(), Config{Exporter: tc.exporter, Endpoint: "127.0.0.1:1"})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		_, isSDK := tp.(*sdktrace.TracerProvider)
		if isSDK != tc.sdk {
			t.Errorf("%+v: SDK provider %v, want %v", tc, isSDK, tc.sdk)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		shutdown(ctx)
		cancel()
	}
}
