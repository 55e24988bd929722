package vault

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func nopOpen(b []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// WriteFrom stores what a reader yields as WriteFile stores bytes:
// created, replaced, appended to a file whose size is not a multiple of
// a chunk, read back by ReadTo; a request id repeats without reading.
func TestWriteFromReadTo(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "big", Quota{})
	rnd := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*ChunkSize+1234)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	r, err := v.WriteFrom(ctx, "/d/f", nopOpen(data), WriteOptions{Parents: true}, Meta{})
	if err != nil || !r.Created || r.Size != int64(len(data)) {
		t.Fatalf("create: %+v %v", r, err)
	}
	more := data[:ChunkSize+7]
	if r, err = v.WriteFrom(ctx, "/d/f", nopOpen(more), WriteOptions{Append: true}, Meta{}); err != nil || r.Size != int64(len(data)+len(more)) {
		t.Fatalf("append: %+v %v", r, err)
	}
	var out bytes.Buffer
	e, err := v.ReadTo(ctx, "/d/f", &out)
	if err != nil || e.Size != int64(len(data)+len(more)) || !bytes.Equal(out.Bytes(), append(append([]byte(nil), data...), more...)) {
		t.Fatalf("read back: %d bytes, entry %+v, %v", out.Len(), e, err)
	}
	// The same content written with WriteFile reads the same.
	if _, err := v.WriteFile(ctx, "/d/g", out.Bytes(), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	got, _, err := v.ReadFile(ctx, "/d/g")
	if err != nil || !bytes.Equal(got, out.Bytes()) {
		t.Fatalf("WriteFile copy differs: %v", err)
	}
	if r, err = v.WriteFrom(ctx, "/d/f", nopOpen([]byte("small")), WriteOptions{}, Meta{RequestID: "r1"}); err != nil || r.Size != 5 || r.Created {
		t.Fatalf("replace: %+v %v", r, err)
	}
	opened := false
	again, err := v.WriteFrom(ctx, "/d/f", func() (io.ReadCloser, error) { opened = true; return nil, errors.New("must not open") }, WriteOptions{}, Meta{RequestID: "r1"})
	if err != nil || opened || again != r {
		t.Fatalf("repeat of r1: %+v opened=%v %v", again, opened, err)
	}
}

// A file over its limit is refused and nothing of it is kept.
func TestWriteFromQuota(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	one := int64(1)
	v := newVault(t, s, "q", Quota{MaxFileSizeMB: &one})
	_, err := v.WriteFrom(ctx, "/f", nopOpen(make([]byte, 2<<20)), WriteOptions{}, Meta{})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Limit != "max_file_size_mb" {
		t.Fatalf("want max_file_size_mb quota error, got %v", err)
	}
	if _, err := v.Stat(ctx, "/f"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused file exists: %v", err)
	}
}
