package vault

// Benchmarks for the vault targets of DESIGN.md §1. `make bench` runs them
// through scripts/bench.sh; BENCHMARKS.md holds the figures.
//
// Large trees are built once per process and shared by every benchmark that
// asks for the same shape (see benchFixture below): building 10,000 files /
// 200 MB takes far longer than any operation measured on it, so rebuilding it
// per benchmark would make a run take many minutes. Benchmarks that change a
// fixture do so in a fork of its base vault (forks are O(1)), so they do not
// see each other's changes. Plain `go test ./vault` runs no benchmark and
// builds no fixture. No benchmark asserts anything about time.
//
// Besides ns/op, benchmarks report the median of their per-iteration
// durations (p50-ms or p50-us), since the targets are stated as medians.

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestMain removes the benchmark fixtures, which outlive any one benchmark.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range benchFixtures {
		f.s.Close()
		os.RemoveAll(f.dir)
	}
	os.Exit(code)
}

// benchFixture is a store holding vault "default/base": files files of size
// bytes each, in directories of 100 files:
// /dNN/sNN/fNN.dat, i.e. for file i: /d{i/10000}/s{i/100%100}/f{i%100}.dat.
// 10,000 files are 1 top directory × 100 subdirectories × 100 files;
// 100,000 files are 10 × 100 × 100.
//
// Content dedups poorly but is cheap to make: every 64 KiB chunk of every
// file starts with its own 16-byte header (file number, chunk number), the
// rest is a fixed pattern. So every chunk is stored, stored bytes equal
// logical bytes, and building costs one SHA-256 and one INSERT per chunk.
type benchFixture struct {
	dir   string
	s     *Store
	files int
	size  int
	seq   int // for fresh vault and checkpoint names
}

// benchFixtures caches fixtures by shape for the life of the test binary.
// Benchmarks run one at a time, so a plain map is enough.
var benchFixtures = map[[2]int]*benchFixture{}

func benchPath(i int) string {
	return fmt.Sprintf("/d%02d/s%02d/f%02d.dat", i/10000, i/100%100, i%100)
}

// benchContent fills buf with the content of file i (version ver).
func benchContent(buf []byte, i, ver int) {
	for off := 0; off < len(buf); off += ChunkSize {
		end := min(off+ChunkSize, len(buf))
		c := buf[off:end]
		for j := range c {
			c[j] = byte('a' + j%26)
		}
		var h [16]byte
		binary.LittleEndian.PutUint64(h[:8], uint64(i)<<16|uint64(ver))
		binary.LittleEndian.PutUint64(h[8:], uint64(off/ChunkSize))
		copy(c, h[:])
	}
}

// fixture returns the store for files × size, building it on first use.
func fixture(b *testing.B, files, size int) *benchFixture {
	b.Helper()
	key := [2]int{files, size}
	if f := benchFixtures[key]; f != nil {
		return f
	}
	ctx := context.Background()
	start := time.Now()
	dir, err := os.MkdirTemp("", "avfs-bench-*")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(ctx, filepath.Join(dir, "store.db"), Options{})
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	f := &benchFixture{dir: dir, s: s, files: files, size: size}
	benchFixtures[key] = f // registered at once so TestMain cleans up after a failure
	if _, err := s.Create(ctx, "default", "base", Quota{}, Meta{}); err != nil {
		b.Fatal(err)
	}
	v := s.Vault("default", "base")
	buf := make([]byte, size)
	const perTx = 1000
	for lo := 0; lo < files; lo += perTx {
		err := v.Update(ctx, Meta{}, func(tx *Tx) error {
			for i := lo; i < min(lo+perTx, files); i++ {
				benchContent(buf, i, 0)
				if _, err := tx.WriteFile(benchPath(i), buf, WriteOptions{Parents: true}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Leave no build work behind for the benchmarks to pay for: fold the
	// WAL into the database and flush the dirty pages to disk.
	if _, err := s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	b.Logf("fixture %d files × %d B (%s) built in %v", files, size, mb(int64(files)*int64(size)), time.Since(start).Round(time.Millisecond))
	return f
}

// fork makes a fresh vault sharing the base tree, for a benchmark that
// changes it.
func (f *benchFixture) fork(b *testing.B, prefix string) *Vault {
	b.Helper()
	name := f.name(prefix)
	if _, err := f.s.Fork(context.Background(), "default", "base", name, "", Meta{}); err != nil {
		b.Fatal(err)
	}
	return f.s.Vault("default", name)
}

func (f *benchFixture) name(prefix string) string {
	f.seq++
	return fmt.Sprintf("%s-%d", prefix, f.seq)
}

// mb formats a byte count in decimal units, as the targets state them.
func mb(n int64) string {
	if n >= 1e9 && n%1e9 == 0 {
		return fmt.Sprintf("%dGB", n/1e9)
	}
	return fmt.Sprintf("%dMB", (n+500_000)/1_000_000)
}

// dbBytes is the store's logical database size (pages in use, WAL included).
func dbBytes(b *testing.B, s *Store) int64 {
	b.Helper()
	var pages, size int64
	if err := s.db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		b.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA page_size`).Scan(&size); err != nil {
		b.Fatal(err)
	}
	return pages * size
}

func chunkCount(b *testing.B, s *Store) int64 {
	b.Helper()
	var n int64
	if err := s.db.QueryRow(`SELECT count(*) FROM chunks`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// latencies records per-iteration durations and reports their median.
type latencies []time.Duration

func (l *latencies) since(t time.Time) { *l = append(*l, time.Since(t)) }

func (l latencies) p(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l latencies) reportMS(b *testing.B) {
	b.ReportMetric(float64(l.p(0.5))/1e6, "p50-ms")
	b.ReportMetric(float64(l.p(0.99))/1e6, "p99-ms")
}

func (l latencies) reportUS(b *testing.B) {
	b.ReportMetric(float64(l.p(0.5))/1e3, "p50-us")
	b.ReportMetric(float64(l.p(0.99))/1e3, "p99-us")
}

// Shapes: 20 kB files, so 10,000 files are 200 MB (the target's vault).
// The 100,000-file vault also uses 2 kB files, so that it too is 200 MB
// and costs no more to build: fork time is meant to depend on neither
// (BenchmarkForkBytes shows the bytes side).
const (
	smallFile = 20_000
	tinyFile  = 2_000
	bigFile   = 200_000 // 10 × smallFile: 10,000 files are 2 GB
)

type shape struct{ files, size int }

func (s shape) String() string {
	return fmt.Sprintf("files=%d/bytes=%s", s.files, mb(int64(s.files)*int64(s.size)))
}

var countShapes = []shape{{10_000, smallFile}, {100_000, tinyFile}}

// checkpointShapes adds 10,000 files at 2 GB: checkpoints and change
// summaries are meant to be independent of content bytes too.
var checkpointShapes = append(countShapes[:len(countShapes):len(countShapes)], shape{10_000, bigFile})

// BenchmarkFork forks a vault of N files to a fresh name per iteration.
func BenchmarkFork(b *testing.B) {
	for _, sh := range countShapes {
		b.Run(sh.String(), func(b *testing.B) { benchFork(b, sh) })
	}
}

// BenchmarkForkBytes forks 10,000 files at 200 MB and at 2 GB: the same
// file count, 10× the bytes.
func BenchmarkForkBytes(b *testing.B) {
	for _, sh := range []shape{{10_000, smallFile}, {10_000, bigFile}} {
		b.Run(sh.String(), func(b *testing.B) { benchFork(b, sh) })
	}
}

func benchFork(b *testing.B, sh shape) {
	ctx := context.Background()
	f := fixture(b, sh.files, sh.size)
	chunks0, db0 := chunkCount(b, f.s), dbBytes(b, f.s)
	var lat latencies
	for b.Loop() {
		name := f.name("fork")
		t := time.Now()
		if _, err := f.s.Fork(ctx, "default", "base", name, "", Meta{}); err != nil {
			b.Fatal(err)
		}
		lat.since(t)
	}
	lat.reportMS(b)
	// Fork copies no content: no new chunk, and a few hundred bytes of
	// database (vault row, audit rows) per fork.
	b.ReportMetric(float64(chunkCount(b, f.s)-chunks0)/float64(b.N), "chunks/fork")
	b.ReportMetric(float64(dbBytes(b, f.s)-db0)/float64(b.N), "dbbytes/fork")
}

// BenchmarkForkBatch100 forks the 10,000-file vault 100 times per
// iteration (the target: ≤ 250 ms per batch).
func BenchmarkForkBatch100(b *testing.B) {
	ctx := context.Background()
	f := fixture(b, 10_000, smallFile)
	var lat latencies
	for b.Loop() {
		t := time.Now()
		for range 100 {
			if _, err := f.s.Fork(ctx, "default", "base", f.name("batch"), "", Meta{}); err != nil {
				b.Fatal(err)
			}
		}
		lat.since(t)
	}
	lat.reportMS(b)
}

// BenchmarkCheckpointSave saves a checkpoint of an unchanged N-file vault,
// under a fresh name per iteration.
func BenchmarkCheckpointSave(b *testing.B) {
	for _, sh := range checkpointShapes {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.fork(b, "save")
			var lat latencies
			i := 0
			for b.Loop() {
				i++
				t := time.Now()
				if _, err := v.SaveCheckpoint(ctx, fmt.Sprintf("c%d", i), "", false, Meta{}); err != nil {
					b.Fatal(err)
				}
				lat.since(t)
			}
			lat.reportMS(b)
		})
	}
}

// change10 overwrites 10 files in 10 different directories, spread across
// the tree, with new content of the same size (one transaction).
func change10(b *testing.B, v *Vault, sh shape, ver int) {
	b.Helper()
	buf := make([]byte, sh.size)
	err := v.Update(context.Background(), Meta{}, func(tx *Tx) error {
		for k := range 10 {
			i := k*(sh.files/10) + 37
			benchContent(buf, i, ver)
			if _, err := tx.WriteFile(benchPath(i), buf, WriteOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCheckpointRestore restores an N-file vault after 10 files
// changed. Each iteration changes 10 files (untimed), then restores
// (timed). The restore deletes the discarded nodes in the same
// transaction, so its cost includes that.
func BenchmarkCheckpointRestore(b *testing.B) {
	for _, sh := range checkpointShapes {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.fork(b, "restore")
			if _, err := v.SaveCheckpoint(ctx, "base", "", false, Meta{}); err != nil {
				b.Fatal(err)
			}
			var lat latencies
			ver := 0
			for b.Loop() {
				b.StopTimer()
				ver++
				change10(b, v, sh, ver)
				b.StartTimer()
				t := time.Now()
				r, err := v.RestoreCheckpoint(ctx, "base", Meta{})
				lat.since(t)
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Changes.Modified) != 10 {
					b.Fatalf("restore undid %d modifications, want 10", len(r.Changes.Modified))
				}
			}
			lat.reportMS(b)
		})
	}
}

// BenchmarkDiff compares a checkpoint of an N-file vault with the current
// tree, 10 files changed in between.
func BenchmarkDiff(b *testing.B) {
	for _, sh := range checkpointShapes {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.fork(b, "diff")
			if _, err := v.SaveCheckpoint(ctx, "before", "", false, Meta{}); err != nil {
				b.Fatal(err)
			}
			change10(b, v, sh, 1)
			var lat latencies
			for b.Loop() {
				t := time.Now()
				ch, err := v.Diff(ctx, "before", "")
				lat.since(t)
				if err != nil {
					b.Fatal(err)
				}
				if len(ch.Modified) != 10 || len(ch.Added)+len(ch.Deleted) != 0 {
					b.Fatalf("diff = %d added, %d modified, %d deleted; want 10 modified", len(ch.Added), len(ch.Modified), len(ch.Deleted))
				}
			}
			lat.reportMS(b)
		})
	}
}

// BenchmarkInfo measures Vault.Info on an N-file vault. Info computes the
// vault's stored (deduplicated) bytes by walking its whole tree, so it is
// linear in file count; the request handler calls it after every fork, which
// is why a fork through the CLI takes longer than Store.Fork itself.
func BenchmarkInfo(b *testing.B) {
	for _, sh := range countShapes {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.s.Vault("default", "base")
			var lat latencies
			for b.Loop() {
				t := time.Now()
				in, err := v.Info(ctx)
				lat.since(t)
				if err != nil || in.Files != int64(sh.files) {
					b.Fatalf("info: %d files, %v", in.Files, err)
				}
			}
			lat.reportMS(b)
		})
	}
}

// openBenchStore opens a fresh store with one empty vault "default/w".
func openBenchStore(b *testing.B) *Vault {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "store.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Create(context.Background(), "default", "w", Quota{}, Meta{}); err != nil {
		b.Fatal(err)
	}
	return s.Vault("default", "w")
}

// BenchmarkWriteSmall writes 1 KiB with Vault.WriteFile, one transaction
// (one commit) per write: a new file in a directory, or the same existing
// file again with new content.
func BenchmarkWriteSmall(b *testing.B) {
	ctx := context.Background()
	data := make([]byte, 1024)
	b.Run("new", func(b *testing.B) {
		v := openBenchStore(b)
		if err := v.Mkdir(ctx, "/src/pkg", 0o755, true, Meta{}); err != nil {
			b.Fatal(err)
		}
		var lat latencies
		i := 0
		for b.Loop() {
			i++
			benchContent(data, i, 0)
			p := fmt.Sprintf("/src/pkg/f%d.go", i)
			t := time.Now()
			if _, err := v.WriteFile(ctx, p, data, WriteOptions{}, Meta{}); err != nil {
				b.Fatal(err)
			}
			lat.since(t)
		}
		lat.reportUS(b)
		b.SetBytes(int64(len(data)))
	})
	b.Run("existing", func(b *testing.B) {
		v := openBenchStore(b)
		if _, err := v.WriteFile(ctx, "/src/pkg/main.go", data, WriteOptions{Parents: true}, Meta{}); err != nil {
			b.Fatal(err)
		}
		var lat latencies
		i := 0
		for b.Loop() {
			i++
			benchContent(data, i, 0)
			t := time.Now()
			if _, err := v.WriteFile(ctx, "/src/pkg/main.go", data, WriteOptions{}, Meta{}); err != nil {
				b.Fatal(err)
			}
			lat.since(t)
		}
		lat.reportUS(b)
		b.SetBytes(int64(len(data)))
	})
}

// BenchmarkReadSmall reads a 1 KiB file with Vault.ReadFile (one read
// transaction each).
func BenchmarkReadSmall(b *testing.B) {
	ctx := context.Background()
	v := openBenchStore(b)
	data := make([]byte, 1024)
	benchContent(data, 1, 0)
	if _, err := v.WriteFile(ctx, "/src/pkg/main.go", data, WriteOptions{Parents: true}, Meta{}); err != nil {
		b.Fatal(err)
	}
	var lat latencies
	for b.Loop() {
		t := time.Now()
		got, _, err := v.ReadFile(ctx, "/src/pkg/main.go")
		lat.since(t)
		if err != nil || len(got) != len(data) {
			b.Fatalf("read %d bytes, %v", len(got), err)
		}
	}
	lat.reportUS(b)
	b.SetBytes(int64(len(data)))
}

// BenchmarkWriteAtLarge writes 4 KiB into a 64 MiB file with Vault.WriteAt,
// one transaction per write, at a different offset each time. Only the
// touched 64 KiB chunk is read, hashed and stored again (plus the file's
// 32 KiB list of chunk hashes), so it should cost about what a small write
// costs, not what rewriting 64 MiB would.
func BenchmarkWriteAtLarge(b *testing.B) {
	ctx := context.Background()
	v := openBenchStore(b)
	const size = 64 << 20
	big := make([]byte, size)
	benchContent(big, 1, 0)
	t0 := time.Now()
	if _, err := v.WriteFile(ctx, "/data/big.bin", big, WriteOptions{Parents: true}, Meta{}); err != nil {
		b.Fatal(err)
	}
	full := time.Since(t0)
	big = nil
	data := make([]byte, 4096)
	var lat latencies
	db0 := dbBytes(b, v.s)
	i := 0
	for b.Loop() {
		i++
		benchContent(data, 2, i)
		// Walk the file in 4 KiB-aligned steps that land in a different
		// chunk each time.
		off := int64(i) * (ChunkSize + 4096) % (size - 4096)
		off -= off % 4096
		t := time.Now()
		if _, err := v.WriteAt(ctx, "/data/big.bin", off, data, Meta{}); err != nil {
			b.Fatal(err)
		}
		lat.since(t)
	}
	lat.reportUS(b)
	b.SetBytes(int64(len(data)))
	// Database growth per write: about one 64 KiB chunk (the old one stays
	// until GC), not 64 MiB.
	b.ReportMetric(float64(dbBytes(b, v.s)-db0)/float64(b.N), "dbbytes/op")
	// For scale: writing the whole file once, which is what each write
	// would cost if it rewrote the file.
	b.ReportMetric(float64(full)/1e6, "fullwrite-ms")
}

// BenchmarkSQLLookup is the floor under every vault operation: one
// directory-entry lookup, the query a path walk runs per component, in a
// read transaction, as the vault runs it today (SQL text, which the driver
// parses again each time) and as a statement prepared once. A small write
// runs about a dozen such statements, a small read about nine.
func BenchmarkSQLLookup(b *testing.B) {
	ctx := context.Background()
	v := openBenchStore(b)
	if _, err := v.WriteFile(ctx, "/src/pkg/main.go", []byte("package main\n"), WriteOptions{Parents: true}, Meta{}); err != nil {
		b.Fatal(err)
	}
	const q = `SELECT child FROM dirents WHERE dir=? AND name=?`
	var root int64
	if err := v.s.db.QueryRow(`SELECT root FROM vaults WHERE name='w'`).Scan(&root); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, query func(tx *sql.Tx) *sql.Row) {
		tx, err := v.s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback()
		for b.Loop() {
			var child int64
			if err := query(tx).Scan(&child); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("unprepared", func(b *testing.B) {
		run(b, func(tx *sql.Tx) *sql.Row { return tx.QueryRowContext(ctx, q, root, "src") })
	})
	b.Run("prepared", func(b *testing.B) {
		st, err := v.s.db.PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		run(b, func(tx *sql.Tx) *sql.Row { return tx.StmtContext(ctx, st).QueryRowContext(ctx, root, "src") })
	})
}

// BenchmarkAutoCheckpointRetained saves auto-checkpoints of an N-file
// vault that keeps 50 of them: past the first 50, each save also deletes
// the oldest one, in its own transaction.
func BenchmarkAutoCheckpointRetained(b *testing.B) {
	for _, sh := range countShapes[:1] {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.fork(b, "auto")
			keep := int64(50)
			if _, err := v.SetSettings(ctx, Settings{AutoKeep: &keep}, Meta{}); err != nil {
				b.Fatal(err)
			}
			i := 0
			for ; i < 50; i++ {
				if _, err := v.SaveCheckpoint(ctx, fmt.Sprintf("a%d", i), "", true, Meta{}); err != nil {
					b.Fatal(err)
				}
			}
			var lat latencies
			for b.Loop() {
				i++
				t := time.Now()
				if _, err := v.SaveCheckpoint(ctx, fmt.Sprintf("a%d", i), "", true, Meta{}); err != nil {
					b.Fatal(err)
				}
				lat.since(t)
			}
			lat.reportMS(b)
			if cs, _ := v.Checkpoints(ctx); len(cs) != 50 {
				b.Fatalf("%d checkpoints kept, want 50", len(cs))
			}
		})
	}
}

// BenchmarkUniqueQuotaWrite writes a small file to an N-file vault in the
// unique quota mode whose logical size is past its limit and unique size
// is not (a copied directory counts once): the quota check walks the tree
// to count unique bytes, on every such write.
func BenchmarkUniqueQuotaWrite(b *testing.B) {
	for _, sh := range countShapes[:1] {
		b.Run(sh.String(), func(b *testing.B) {
			ctx := context.Background()
			f := fixture(b, sh.files, sh.size)
			v := f.fork(b, "uq")
			if err := v.Copy(ctx, "/d00/s00", "/copy", true, Meta{}); err != nil {
				b.Fatal(err)
			}
			in, err := v.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			limit := in.StoredBytes>>20 + 1 // above unique, below logical
			if _, err := v.SetQuota(ctx, Quota{MaxSizeMB: &limit}, Meta{}); err != nil {
				b.Fatal(err)
			}
			if _, err := v.SetSettings(ctx, Settings{QuotaMode: QuotaUnique}, Meta{}); err != nil {
				b.Fatal(err)
			}
			var lat latencies
			i := 0
			for b.Loop() {
				i++
				t := time.Now()
				if _, err := v.WriteFile(ctx, fmt.Sprintf("/small-%d.txt", i), []byte("x"), WriteOptions{}, Meta{}); err != nil {
					b.Fatal(err)
				}
				lat.since(t)
			}
			lat.reportMS(b)
		})
	}
}
