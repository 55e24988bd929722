package mount

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime/pprof"
	"testing"

	"github.com/avfs/avfs/vault"
)

// BenchmarkColdRead reads every file of a tree of 2,000 files of 4 KiB
// in 40 directories (mountbench's cold4k) through a fresh mount of a
// store opened again, as a new `avfs mount` process would: the kernel,
// the tree and SQLite's page cache all start empty (the OS page cache
// too where /proc/sys/vm/drop_caches is writable). Each file is opened,
// read to its end and closed, as cat does. distinct gives every file its
// own content (mountbench's cold tree); otherwise they share one chunk.
func BenchmarkColdRead(b *testing.B) {
	for _, distinct := range []bool{false, true} {
		b.Run(fmt.Sprintf("distinct=%v", distinct), func(b *testing.B) {
			benchColdRead(b, distinct)
		})
	}
}

func benchColdRead(b *testing.B, distinct bool) {
	ctx := context.Background()
	file := filepath.Join(b.TempDir(), "store.db")
	s, err := vault.Open(ctx, file, vault.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Create(ctx, "default", "v", vault.Quota{}, vault.Meta{}); err != nil {
		b.Fatal(err)
	}
	var paths []string
	err = s.Vault("default", "v").Update(ctx, vault.Meta{}, func(tx *vault.Tx) error {
		for d := range 40 {
			for i := range 50 {
				p := fmt.Sprintf("/flat/d%02d/f%02d.txt", d, i)
				data := pattern(4096)
				if distinct {
					copy(data, fmt.Sprintf("file %d %d", d, i))
				}
				if _, err := tx.WriteFile(p, data, vault.WriteOptions{Parents: true}); err != nil {
					return err
				}
				paths = append(paths, p)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	dir := b.TempDir()
	buf := make([]byte, 128<<10)
	for b.Loop() {
		b.StopTimer()
		s, err := vault.Open(ctx, file, vault.Options{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := New(ctx, s.Vault("default", "v"), dir, Options{QueueCloses: true})
		if err != nil {
			b.Fatal(err)
		}
		dropCaches()
		b.StartTimer()
		stop := profileSection()
		for _, p := range paths {
			f, err := os.Open(dir + p)
			if err != nil {
				b.Fatal(err)
			}
			for {
				n, err := f.Read(buf)
				if n == 0 || err != nil {
					break
				}
			}
			f.Close()
		}
		stop()
		b.StopTimer()
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(paths)), "µs/file")
}

// profileSection starts a CPU profile of the timed part of one
// iteration into $AVFS_BENCH_PROFILE.N (N counts up), when set, and
// returns its stop.
func profileSection() func() {
	base := os.Getenv("AVFS_BENCH_PROFILE")
	if base == "" {
		return func() {}
	}
	profiles++
	f, err := os.Create(fmt.Sprintf("%s.%d", base, profiles))
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

var profiles int

// dropCaches empties the OS page cache where the process may (root).
func dropCaches() {
	_ = osexec.Command("sync").Run()
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}

// BenchmarkGit runs git init, add -A and commit on a tree of 2,000
// source-like files in 100 directories written through the mount just
// before (mountbench's git workload), in a mount that queues closes.
func BenchmarkGit(b *testing.B) {
	ctx := context.Background()
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + b.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	var txs int64
	for b.Loop() {
		b.StopTimer()
		v := testVault(b, vault.Quota{})
		m, err := New(ctx, v, b.TempDir(), Options{QueueCloses: true})
		if err != nil {
			b.Fatal(err)
		}
		dir := m.Dir() + "/tree"
		for i := range 2000 {
			d := i / 20
			p := fmt.Sprintf("%s/src%d/mod%d/file%02d.go", dir, d/10, d%10, i%20)
			if i%20 == 0 {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			data := fmt.Appendf(nil, "// file %d\n", i)
			for l := range 8 + (i*37)%56 {
				data = fmt.Appendf(data, "func f%d_%d(x int) int { return x*%d + %d } // %d\n", i, l, (i*31+l)%97, (l*17+i)%1000, l)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		syncMount(b, m)
		before, err := v.LogPos(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		stop := profileSection()
		cmd := commandIn(dir, "sh", "-c", "git init -q && git -c user.email=a@b -c user.name=b -c gc.auto=0 add -A && git -c user.email=a@b -c user.name=b -c gc.auto=0 commit -q -m tree")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git: %v\n%s", err, out)
		}
		stop()
		b.StopTimer()
		syncMount(b, m)
		after, err := v.LogPos(ctx)
		if err != nil {
			b.Fatal(err)
		}
		txs += after.Seq - before.Seq
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(txs)/float64(b.N), "vault-tx/op")
}
