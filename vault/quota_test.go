package vault

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestQuotaLimits(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if _, err := s.Create(ctx, "ns", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("ns", "v")
	i := func(n int64) *int64 { return &n }
	// The largest accepted values keep every write possible: the MB to
	// bytes conversion and usage plus growth do not overflow.
	if _, err := v.SetQuota(ctx, Quota{MaxSizeMB: i(MaxQuotaMB), MaxFiles: i(MaxQuotaFiles), MaxFileSizeMB: i(MaxQuotaMB)}, Meta{}); err != nil {
		t.Fatalf("largest quota: %v", err)
	}
	if _, err := v.WriteFile(ctx, "/f", []byte("x"), WriteOptions{}, Meta{}); err != nil {
		t.Fatalf("write under the largest quota: %v", err)
	}
	for _, q := range []Quota{
		{MaxSizeMB: i(MaxQuotaMB + 1)},
		{MaxSizeMB: i(1 << 43)}, // once made every write fail: 2^43 << 20 overflowed
		{MaxFileSizeMB: i(MaxQuotaMB + 1)},
		{MaxFiles: i(MaxQuotaFiles + 1)},
		{MaxSizeMB: i(-1)}, // once cleared the limit
		{MaxFiles: i(-1)},
		{MaxSizeMB: i(1<<63 - 1)},
	} {
		_, err := v.SetQuota(ctx, q, Meta{})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("quota %+v: %v, want ErrInvalidArgument", q, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.FormatInt(MaxQuotaMB, 10)) && !strings.Contains(err.Error(), strconv.FormatInt(MaxQuotaFiles, 10)) {
			t.Errorf("quota %+v: %q does not state the largest value", q, err)
		}
		if _, err := s.Create(ctx, "ns", "w", q, Meta{}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("create with %+v: %v, want ErrInvalidArgument", q, err)
		}
	}
	// A refused quota changed nothing.
	if q, _, _ := v.Quota(ctx); q.MaxSizeMB == nil || *q.MaxSizeMB != MaxQuotaMB {
		t.Fatalf("quota after refusals: %+v", q)
	}
	// At the smallest limits: exactly 1 MiB fits, one more byte does not.
	if _, err := v.SetQuota(ctx, Quota{MaxSizeMB: i(1), MaxFiles: i(2)}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "/f", bytes.Repeat([]byte("a"), 1<<20), WriteOptions{}, Meta{}); err != nil {
		t.Fatalf("1 MiB under max_size_mb 1: %v", err)
	}
	if _, err := v.WriteFile(ctx, "/g", []byte("b"), WriteOptions{}, Meta{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("one byte past max_size_mb: %v, want ErrQuota", err)
	}
	if _, err := v.SetQuota(ctx, Quota{MaxSizeMB: i(0), MaxFiles: i(0)}, Meta{}); err != nil {
		t.Fatalf("zero limits: %v", err)
	}
	if err := v.Mkdir(ctx, "/d", 0o755, false, Meta{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("mkdir past max_files 0: %v, want ErrQuota", err)
	}
}
