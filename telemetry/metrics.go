package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// MetricsConfig selects whether metrics are recorded. Metrics are read by
// scraping the handler SetupMetrics returns (Prometheus text format).
type MetricsConfig struct {
	Enabled     bool
	ServiceName string // default "avfs"
}

// SetupMetrics builds the meter provider cfg describes: with Enabled, an
// SDK provider exporting through the OTel Prometheus exporter to a
// registry of its own (never the global default), and the HTTP handler
// that serves that registry; otherwise the no-op provider and a nil
// handler. shutdown stops the provider; call it once, before exit.
func SetupMetrics(cfg MetricsConfig) (metric.MeterProvider, http.Handler, func(context.Context) error, error) {
	if !cfg.Enabled {
		return metricnoop.NewMeterProvider(), nil, func(context.Context) error { return nil }, nil
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "avfs"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), mp.Shutdown, nil
}

// MeterProvider returns mp, or the no-op provider when mp is nil.
func MeterProvider(mp metric.MeterProvider) metric.MeterProvider {
	if mp == nil {
		return metricnoop.NewMeterProvider()
	}
	return mp
}

// HTTPServer serves /metrics and /healthz.
type HTTPServer struct {
	Addr string // the bound address (resolves port 0)
	srv  *http.Server
	done chan error
}

// ServeHTTP listens on addr and serves metrics (the handler from
// SetupMetrics; nil answers 404) on /metrics and "ok" on /healthz until
// Stop.
func ServeHTTP(addr string, metrics http.Handler) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	s := &HTTPServer{Addr: ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Stop shuts the server down, waiting for requests in flight until ctx
// ends.
func (s *HTTPServer) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
