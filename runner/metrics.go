package runner

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/avfs/avfs/handler"
)

// scopeName is the instrumentation scope of the pipeline's metrics and
// spans: the one it had in worker/, so they read as before the move.
const scopeName = "github.com/avfs/avfs/worker"

// execMetrics are a Runner's instruments; attributes are limited to the
// run's status.
type execMetrics struct {
	runs        metric.Int64Counter
	duration    metric.Float64Histogram
	running     metric.Int64UpDownCounter
	checkpoints metric.Int64Counter
}

func newExecMetrics(mp metric.MeterProvider) execMetrics {
	m := mp.Meter(scopeName)
	var em execMetrics
	em.runs, _ = m.Int64Counter("avfs.exec.runs", metric.WithUnit("{run}"),
		metric.WithDescription("Commands answered, by status (completed, timed_out, canceled, failed_to_start, denied, approval_required)."))
	em.duration, _ = m.Float64Histogram("avfs.exec.duration", metric.WithUnit("s"),
		metric.WithDescription("Wall time of commands that ran, by status."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
	em.running, _ = m.Int64UpDownCounter("avfs.exec.running", metric.WithUnit("{run}"),
		metric.WithDescription("Commands running now."))
	em.checkpoints, _ = handler.CheckpointsSaved(mp)
	return em
}

func (em execMetrics) finished(ctx context.Context, status string, seconds float64, ran bool) {
	attrs := metric.WithAttributes(attribute.String("status", status))
	em.runs.Add(ctx, 1, attrs)
	if ran {
		em.duration.Record(ctx, seconds, attrs)
	}
}

// observeMounts reports the number of vaults ms keeps mounted as
// avfs.mounts.active; unregister stops it.
func observeMounts(mp metric.MeterProvider, ms *Mounts) (unregister func() error, err error) {
	m := mp.Meter(scopeName)
	g, err := m.Int64ObservableGauge("avfs.mounts.active", metric.WithUnit("{mount}"),
		metric.WithDescription("Vaults mounted for commands."))
	if err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, int64(ms.active()))
		return nil
	}, g)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}
