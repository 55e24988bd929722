package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
)

// BenchmarkMountFsync is what an fsync through a worker's mount
// (mount.start) costs: a 1 KiB pwrite then fsync of one file, in a vault
// of 1 or 1,000 files. In sync mode the fsync returns once the fleet
// holds it (a snapshot push pinned to the log); in checkpoint mode it
// commits to the owner's store only, as a mount's fsync did before.
// p50-ms and p99-ms are per fsync.
func BenchmarkMountFsync(b *testing.B) {
	f := startFleet(b)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	data := make([]byte, 1024)
	for _, files := range []int{1, 1000} {
		v := fmt.Sprintf("fs%d", files)
		if err := c.Call(ctx, "default", v, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
			b.Fatal(err)
		}
		for i := 1; i < files; i++ {
			if err := c.Call(ctx, "default", v, messages.OpWrite, messages.WriteArgs{Path: fmt.Sprintf("/f%d", i), Content: data}, nil); err != nil {
				b.Fatal(err)
			}
		}
		dir := b.TempDir()
		if err := c.Call(ctx, "default", v, messages.OpMountStart, messages.MountArgs{Dir: dir, Machine: runner.MachineID()}, nil); err != nil {
			b.Fatal(err)
		}
		fh, err := os.OpenFile(filepath.Join(dir, "synced"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"sync", "checkpoint"} {
			if err := c.Call(ctx, "default", v, messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: mode}, nil); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("files=%d/%s", files, mode), func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				for i := 0; i < b.N; i++ {
					data[0] = byte(i)
					t0 := time.Now()
					if _, err := fh.WriteAt(data, int64(i%64)*1024); err != nil {
						b.Fatal(err)
					}
					if err := fh.Sync(); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
		fh.Close()
		if err := c.Call(ctx, "default", v, messages.OpMountStop, messages.MountArgs{Dir: dir, Machine: runner.MachineID()}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
