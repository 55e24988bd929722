package vault

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// huge is the size from the issue: truncate -s 999999999999999 used to
// make the process allocate a chunk list for the whole length and die.
const huge = 999999999999999

// readBack reads len(want) bytes of p at off and compares them.
func readBack(t *testing.T, v *Vault, p string, off int64, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	n, err := v.ReadAt(context.Background(), p, off, got)
	if err != nil {
		t.Fatalf("read %s at %d: %v", p, off, err)
	}
	if n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("read %s at %d: got %q, want %q", p, off, got[:n], want)
	}
}

func TestSparseHugeFile(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "sparse", Quota{})
	mustWrite(t, v, "/f", []byte("head"))
	if err := v.Truncate(ctx, "/f", huge, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(ctx, "/f", huge-1, []byte("T"), Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(ctx, "/g", 0, nil, Meta{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("write to a missing file: got %v, want ErrNotFound", err)
	}
	mustWrite(t, v, "/g", nil)
	if _, err := v.WriteAt(ctx, "/g", huge, []byte("x"), Meta{}); err != nil {
		t.Fatal(err)
	}
	st, err := v.Stat(ctx, "/f")
	if err != nil || st.Size != huge {
		t.Fatalf("stat: %+v, %v; want size %d", st, err, huge)
	}
	readBack(t, v, "/f", 0, []byte("head\x00\x00"))
	readBack(t, v, "/f", huge/2, make([]byte, 3*ChunkSize+7))
	readBack(t, v, "/f", huge-3, []byte("\x00\x00T"))
	readBack(t, v, "/g", huge-1, []byte("\x00x"))

	// Holes store nothing: the vault holds the content chunks only.
	info, err := v.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.StoredBytes > 3*ChunkSize {
		t.Fatalf("stored bytes %d: holes were stored", info.StoredBytes)
	}
	var chunks int
	if err := s.db.QueryRow(`SELECT count(*) FROM chunks`).Scan(&chunks); err != nil {
		t.Fatal(err)
	}
	if chunks > 4 {
		t.Fatalf("%d chunks stored for three short runs of content", chunks)
	}
	// A whole read of such a file is refused, not attempted.
	if _, _, err := v.ReadFile(ctx, "/f"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("whole read of a huge sparse file: got %v, want ErrInvalidArgument", err)
	}

	// Checkpoint, fork, change, diff, restore, export, import, GC.
	if _, err := v.SaveCheckpoint(ctx, "big", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "sparse", "copy", "", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(ctx, "/f", huge/2, []byte("middle"), Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Truncate(ctx, "/g", 10, Meta{}); err != nil {
		t.Fatal(err)
	}
	ch, err := v.Diff(ctx, "big", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Modified) != 2 {
		t.Fatalf("diff: %+v, want /f and /g modified", ch)
	}
	fork := s.Vault("default", "copy")
	readBack(t, fork, "/f", huge/2, make([]byte, 6))
	readBack(t, v, "/f", huge/2-1, []byte("\x00middle\x00"))
	mustRead(t, v, "/g", make([]byte, 10))
	if _, err := v.RestoreCheckpoint(ctx, "big", Meta{}); err != nil {
		t.Fatal(err)
	}
	readBack(t, v, "/f", huge/2, make([]byte, 6))
	readBack(t, v, "/g", huge-1, []byte("\x00x"))
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sparse.avfs")
	if _, err := s.Export(ctx, "default", "sparse", file); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStore(t)
	if _, err := s2.Import(ctx, file, "default", "back", Meta{}); err != nil {
		t.Fatal(err)
	}
	back := s2.Vault("default", "back")
	readBack(t, back, "/f", 0, []byte("head\x00"))
	readBack(t, back, "/f", huge-2, []byte("\x00T"))
	if err := s2.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	// Cut back to small: what was past the cut reads as zeros when the
	// file grows again.
	if err := back.Truncate(ctx, "/f", 2, Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := back.Truncate(ctx, "/f", 6, Meta{}); err != nil {
		t.Fatal(err)
	}
	mustRead(t, back, "/f", []byte("he\x00\x00\x00\x00"))
}

func TestMaxFileSize(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "store.db"), Options{MaxFileSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	v := newVault(t, s, "capped", Quota{})
	mustWrite(t, v, "/f", []byte("keep"))
	var qe *QuotaError
	if err := v.Truncate(ctx, "/f", 1<<50, Meta{}); !errors.As(err, &qe) || qe.Limit != "max_file_size" {
		t.Fatalf("truncate past the store's limit: got %v, want a max_file_size QuotaError", err)
	}
	if _, err := v.WriteAt(ctx, "/f", 1<<30, []byte("x"), Meta{}); !errors.As(err, &qe) {
		t.Fatalf("write past the store's limit: got %v, want a QuotaError", err)
	}
	mustRead(t, v, "/f", []byte("keep"))
	if err := v.Truncate(ctx, "/f", 1<<30, Meta{}); err != nil {
		t.Fatalf("truncate to exactly the limit: %v", err)
	}
}

// BenchmarkSparseExtend measures extending a file by 1 GiB of hole, which
// cost about 1.35 s when every hole chunk was stored.
func BenchmarkSparseExtend(b *testing.B) {
	ctx := context.Background()
	s := openTestStore(b)
	v := newVault(b, s, "bench", Quota{})
	mustWrite(b, v, "/f", []byte("x"))
	for i := range b.N {
		if err := v.Truncate(ctx, "/f", int64(i+1)<<30, Meta{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSeekHoles: SEEK_DATA and SEEK_HOLE over a file with content, a hole
// run and content again, as cp --sparse and tar -S use them.
func TestSeekHoles(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "seek", Quota{})
	mustWrite(t, v, "/f", []byte("head"))
	if _, err := v.WriteAt(ctx, "/f", 10*ChunkSize+5, []byte("tail"), Meta{}); err != nil {
		t.Fatal(err)
	}
	size := int64(10*ChunkSize + 9)
	for _, c := range []struct {
		off  int64
		hole bool
		want int64
		ok   bool
	}{
		{0, false, 0, true},
		{0, true, ChunkSize, true},
		{3, true, ChunkSize, true},
		{ChunkSize + 7, false, 10 * ChunkSize, true},
		{ChunkSize + 7, true, ChunkSize + 7, true},
		{10 * ChunkSize, true, size, true},
		{size - 1, false, size - 1, true},
		{size, false, 0, false},
		{size, true, 0, false},
	} {
		got, ok, err := v.Seek(ctx, "/f", c.off, c.hole)
		if err != nil || got != c.want || ok != c.ok {
			t.Errorf("Seek(%d, hole %v): got %d, %v, %v; want %d, %v", c.off, c.hole, got, ok, err, c.want, c.ok)
		}
	}
	if err := v.Truncate(ctx, "/f", 20*ChunkSize, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := v.Seek(ctx, "/f", 11*ChunkSize, false); ok {
		t.Error("SEEK_DATA in the trailing hole: found data, want none (ENXIO)")
	}
}
