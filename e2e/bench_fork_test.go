package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/avfs/avfs/messages"
)

// BenchmarkForkOnAnotherWorker is the fork half of parallel attempts on
// a fleet: spread forks of a 1,000-file / 4 MB vault over two workers
// with separate stores, each followed by the first read in the fork, as
// an attempt's exec would start. Forks that land on the source's worker
// copy nothing; ones that land on the other worker are pushed (manifest
// only: the base's chunks went at its checkpoint) and pulled there
// (manifest, plus the chunks that store lacks: all of them the first
// time, none after). Reported: p50 of both kinds, their ratio, and the
// first (cold) fork on the other worker.
func BenchmarkForkOnAnotherWorker(b *testing.B) {
	f := startFleet(b)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	call := func(vault string, op messages.Op, args, out any) {
		if err := c.Call(ctx, "default", vault, op, args, out); err != nil {
			b.Fatalf("%s %s: %v", op, vault, err)
		}
	}
	call("base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
	for d := 0; d < 10; d++ {
		var batch messages.WriteBatchArgs
		for i := 0; i < 100; i++ {
			data := make([]byte, 4096)
			rand.Read(data)
			batch.Files = append(batch.Files, messages.BatchFile{Path: fmt.Sprintf("/d%d/f%03d.bin", d, i), Content: data})
		}
		call("base", messages.OpWriteBatch, batch, nil)
	}
	call("base", messages.OpCheckpointSave, messages.CheckpointArgs{Name: "ready"}, nil)
	var info messages.VaultResult
	call("base", messages.OpVaultInfo, nil, &info)
	src := info.Vault.Worker
	var same, other []time.Duration
	cold := time.Duration(-1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("fork%06d", i)
		t0 := time.Now()
		var fr messages.ForkResult
		call("base", messages.OpVaultFork, messages.VaultForkArgs{Target: name, Checkpoint: "ready", Placement: messages.PlacementSpread}, &fr)
		call(name, messages.OpStat, messages.PathArgs{Path: "/d9/f099.bin"}, nil)
		took := time.Since(t0)
		switch {
		case fr.Vault.Worker == src:
			same = append(same, took)
		case cold < 0:
			cold = took
		default:
			other = append(other, took)
		}
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(same), "same-worker-p50-ms")
	b.ReportMetric(p50(other), "other-worker-p50-ms")
	if p50(same) > 0 {
		b.ReportMetric(p50(other)/p50(same), "other/same")
	}
	if cold >= 0 {
		b.ReportMetric(float64(cold.Microseconds())/1000, "other-worker-cold-ms")
	}
}
