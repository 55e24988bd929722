package runner

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/avfs/avfs/messages"
)

func TestExecMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	f := newFixture(t, Config{Meter: mp})
	f.do(messages.OpVaultCreate, "m", nil, nil)
	if env := f.exec("m", messages.ExecArgs{Shell: "exit 3", Checkpoint: "always"}); env.Status != messages.StatusCompleted {
		t.Fatalf("status %s", env.Status)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value("status"); ok && v != attribute.StringValue(messages.StatusCompleted) {
						continue
					}
					got[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			}
		}
	}
	for name, want := range map[string]int64{"avfs.exec.runs": 1, "avfs.exec.duration": 1, "avfs.exec.running": 0, "avfs.checkpoints.saved": 1} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
}
