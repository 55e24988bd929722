package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/avfs/avfs/messages"
)

// BenchmarkFleetVaultList is a namespace-scoped request through the
// embedded fleet: vault.list of 64 vaults spread over two workers with
// a store each, and approval.list, p50 and p99 latency of one caller.
func BenchmarkFleetVaultList(b *testing.B) {
	f := startFleet(b)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	const vaults = 64
	for i := range vaults {
		if err := c.Call(ctx, "default", fmt.Sprintf("l%02d", i), messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, op := range []messages.Op{messages.OpVaultList, messages.OpApprovalList} {
		b.Run(string(op), func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				var list messages.VaultListResult
				if err := c.Call(ctx, "default", "", op, nil, &list); err != nil {
					b.Fatal(err)
				}
				lat[i] = time.Since(t0)
				if op == messages.OpVaultList && len(list.Vaults) != vaults {
					b.Fatalf("listed %d vaults, want %d", len(list.Vaults), vaults)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
