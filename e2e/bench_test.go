package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// BenchmarkFleetWrite1KiB is DESIGN.md §7's small request: a 1 KiB write
// through the embedded fleet, by both paths: direct (client → the vault's
// owner over core NATS → vault → reply) and intake (client → JetStream
// intake → dispatcher → work stream → worker → vault → reply). For each it
// reports the p50 latency of one caller, the throughput of 16
// concurrent callers on 16 vaults, one worker, and that of 16 callers on
// one vault.
func BenchmarkFleetWrite1KiB(b *testing.B) {
	f := startFleet(b)
	f.addWorker("w1")
	direct := f.client()
	intake := f.client()
	intake.DisableDirect = true
	ctx := context.Background()
	const callers = 16
	for i := 0; i < callers; i++ {
		// The create's reply tells the direct client the vaults' owner.
		if err := direct.Call(ctx, "default", fmt.Sprintf("b%02d", i), messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	data := make([]byte, 1024)
	// Every vault in replication mode m (sync is the default).
	mode := func(m string) {
		for i := 0; i < callers; i++ {
			if err := direct.Call(ctx, "default", fmt.Sprintf("b%02d", i), messages.OpVaultSet, messages.VaultSetArgs{Key: "replication", Value: m}, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, path := range []struct {
		name string
		c    *client.Client
		mode string
	}{{"direct", direct, "sync"}, {"intake", intake, "sync"}, {"direct-async", direct, "async"}, {"direct-checkpoint", direct, "checkpoint"}} {
		mode(path.mode)
		write := func(v string, i int) {
			if err := path.c.Call(ctx, "default", v, messages.OpWrite, messages.WriteArgs{Path: fmt.Sprintf("/f%d", i%100), Content: data}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(path.name+"/latency", func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				write("b00", i)
				lat[i] = time.Since(t0)
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
		// 16 callers on 16 vaults, then on one vault, whose requests the
		// worker serves one at a time.
		for _, tc := range []struct {
			name  string
			vault func(w int) string
		}{
			{"/throughput", func(w int) string { return fmt.Sprintf("b%02d", w) }},
			{"/throughput-onevault", func(int) string { return "b00" }},
		} {
			b.Run(path.name+tc.name, func(b *testing.B) {
				defer profileSteady(b, path.name+strings.TrimPrefix(tc.name, "/throughput"))()
				defer cpuPerRequest(b)()
				start := time.Now()
				var wg sync.WaitGroup
				for w := 0; w < callers; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := w; i < b.N; i += callers {
							write(tc.vault(w), i)
						}
					}(w)
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
			})
		}
	}
}

// profileSteady writes a CPU profile of the measured loop only (the
// fleet's start and the vaults' mode switches left out) when
// AVFS_BENCH_CPUPROFILE names a directory: name.cpu there, for
// `go tool pprof -top`. (go test's -cpuprofile covers the set-up too.)
func profileSteady(b *testing.B, name string) func() {
	dir := os.Getenv("AVFS_BENCH_CPUPROFILE")
	if dir == "" || b.N < 100 {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// cpuPerRequest reports the CPU time the whole process (callers,
// nats-server, dispatcher, worker) spent per request of the measured
// loop, user and system: unlike req/s it hardly moves with what else
// the machine runs, and 2 cores divided by it bounds the throughput of
// this one-process fleet on an idle 2-core machine.
func cpuPerRequest(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	t0 := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-t0).Microseconds())/float64(b.N), "cpu-us/req")
	}
}
