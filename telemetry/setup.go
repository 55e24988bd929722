package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporters Setup knows.
const (
	ExporterNone     = "none"
	ExporterOTLPHTTP = "otlp-http"
	ExporterOTLPGRPC = "otlp-grpc"
	// ExporterOTLP picks HTTP or gRPC from OTEL_EXPORTER_OTLP_PROTOCOL
	// ("grpc", or "http/protobuf", the default), as other OTel programs do.
	ExporterOTLP = "otlp"
)

// Config selects where traces go. The standard OTEL_* variables win over
// it: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT over Endpoint,
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over ServiceName,
// OTEL_TRACES_SAMPLER(_ARG) over SampleRatio, OTEL_EXPORTER_OTLP_HEADERS
// next to Headers.
type Config struct {
	// Exporter: none | otlp | otlp-http | otlp-grpc. Empty means none
	// unless OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set, then otlp: the
	// standard variables alone switch export on, as in other programs.
	Exporter    string
	Endpoint    string            // host:port or a URL; default the SDK's (localhost:4318)
	Headers     map[string]string // sent with every export (auth tokens)
	Insecure    bool              // plain HTTP instead of HTTPS
	SampleRatio float64           // fraction of new traces kept, 0 < r <= 1; 0 means 1
	ServiceName string            // default "avfs"
}

// Setup builds the tracer provider cfg describes. With the none exporter
// it returns the no-op provider. shutdown flushes pending spans; call it
// once, before exit.
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	nop := func(context.Context) error { return nil }
	kind := cfg.Exporter
	if kind == "" && setEnv("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		kind = ExporterOTLP
	}
	if kind == ExporterOTLP {
		kind = ExporterOTLPHTTP
		if p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") + os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); strings.HasPrefix(p, "grpc") {
			kind = ExporterOTLPGRPC
		}
	}
	var exp sdktrace.SpanExporter
	var err error
	switch kind {
	case "", ExporterNone:
		return noop.NewTracerProvider(), nop, nil
	case ExporterOTLPHTTP:
		exp, err = httpExporter(ctx, cfg)
	case ExporterOTLPGRPC:
		exp, err = grpcExporter(ctx, cfg)
	default:
		return nil, nil, fmt.Errorf("telemetry exporter %q: want none, otlp, otlp-http or otlp-grpc", cfg.Exporter)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s exporter: %w", kind, err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "avfs"
	}
	// Later options win in resource.New: the environment overrides the
	// configured service name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	// The SDK reads OTEL_TRACES_SAMPLER itself; an explicit sampler would
	// override it.
	if !setEnv("OTEL_TRACES_SAMPLER") {
		r := cfg.SampleRatio
		if r <= 0 || r > 1 {
			r = 1
		}
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return tp, tp.Shutdown, nil
}

// otlpSettings are the configured values that apply: each only where the
// matching OTEL_* variable is unset, since the SDK reads those itself.
type otlpSettings struct {
	url, hostPort string // at most one is set
	headers       map[string]string
	insecure      bool
}

func settingsOf(cfg Config) otlpSettings {
	var o otlpSettings
	if cfg.Endpoint != "" && !setEnv("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		if hasScheme(cfg.Endpoint) {
			o.url = cfg.Endpoint
		} else {
			o.hostPort = cfg.Endpoint
		}
	}
	if len(cfg.Headers) > 0 && !setEnv("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
		o.headers = cfg.Headers
	}
	o.insecure = cfg.Insecure && !setEnv("OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE")
	return o
}

func httpExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	o := settingsOf(cfg)
	var opts []otlptracehttp.Option
	if o.url != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(o.url))
	}
	if o.hostPort != "" {
		opts = append(opts, otlptracehttp.WithEndpoint(o.hostPort))
	}
	if o.headers != nil {
		opts = append(opts, otlptracehttp.WithHeaders(o.headers))
	}
	if o.insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return otlptracehttp.New(ctx, opts...)
}

func grpcExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	o := settingsOf(cfg)
	var opts []otlptracegrpc.Option
	if o.url != "" {
		opts = append(opts, otlptracegrpc.WithEndpointURL(o.url))
	}
	if o.hostPort != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(o.hostPort))
	}
	if o.headers != nil {
		opts = append(opts, otlptracegrpc.WithHeaders(o.headers))
	}
	if o.insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

func setEnv(names ...string) bool {
	for _, n := range names {
		if os.Getenv(n) != "" {
			return true
		}
	}
	return false
}

func hasScheme(s string) bool { return strings.Contains(s, "://") }
