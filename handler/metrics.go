package handler

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/avfs/avfs/messages"
)

const meterName = "github.com/avfs/avfs/handler"

// metrics are the handler's instruments. Their attributes are kept to a
// few values each (op, outcome): never a vault, path or request id.
type metrics struct {
	requests    metric.Int64Counter
	duration    metric.Float64Histogram
	quota       metric.Int64Counter
	forks       metric.Int64Counter
	checkpoints metric.Int64Counter
	restores    metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) *metrics {
	m := mp.Meter(meterName)
	var ms metrics
	// Instrument creation only fails on an invalid name; the returned
	// instrument is then a working no-op, so the errors are dropped.
	ms.requests, _ = m.Int64Counter("avfs.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests served, by op and outcome (ok or the error code)."))
	ms.duration, _ = m.Float64Histogram("avfs.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to serve a request, by op and outcome."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	ms.quota, _ = m.Int64Counter("avfs.quota.rejections", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused with QUOTA_EXCEEDED, by op."))
	ms.forks, _ = m.Int64Counter("avfs.forks", metric.WithUnit("{fork}"),
		metric.WithDescription("Vaults forked."))
	ms.checkpoints, _ = CheckpointsSaved(mp)
	ms.restores, _ = m.Int64Counter("avfs.checkpoints.restored", metric.WithUnit("{checkpoint}"),
		metric.WithDescription("Checkpoints restored."))
	return &ms
}

// CheckpointsSaved is the avfs.checkpoints.saved counter of mp, shared
// with the exec layer, which records automatic checkpoints (auto=true).
func CheckpointsSaved(mp metric.MeterProvider) (metric.Int64Counter, error) {
	return mp.Meter(meterName).Int64Counter("avfs.checkpoints.saved", metric.WithUnit("{checkpoint}"),
		metric.WithDescription("Checkpoints saved, by whether exec took them automatically."))
}

// record counts one served request.
func (ms *metrics) record(ctx context.Context, op messages.Op, known bool, rep messages.Reply, d time.Duration) {
	outcome := "ok"
	if rep.Error != nil {
		outcome = string(rep.Error.Code)
	}
	opName := string(op)
	if !known {
		opName = "unknown" // ops are caller input: keep the label set closed
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("op", opName), attribute.String("outcome", outcome)))
	ms.requests.Add(ctx, 1, attrs)
	ms.duration.Record(ctx, d.Seconds(), attrs)
	if rep.Error != nil {
		if rep.Error.Code == messages.CodeQuotaExceeded {
			ms.quota.Add(ctx, 1, metric.WithAttributes(attribute.String("op", opName)))
		}
		return
	}
	switch op {
	case messages.OpVaultFork:
		ms.forks.Add(ctx, 1)
	case messages.OpCheckpointSave:
		ms.checkpoints.Add(ctx, 1, metric.WithAttributes(attribute.Bool("auto", false)))
	case messages.OpCheckpointRestore:
		ms.restores.Add(ctx, 1)
	}
}
