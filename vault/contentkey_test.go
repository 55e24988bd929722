package vault

import (
	"context"
	"errors"
	"testing"
)

func TestContentKey(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	a, b := newVault(t, s, "a", Quota{}), newVault(t, s, "b", Quota{})
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, v := range []*Vault{a, b} {
		if _, err := v.WriteFile(ctx, "/f", data, WriteOptions{}, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	ka, e, err := a.ContentKey(ctx, "/f")
	if err != nil || e.Size != int64(len(data)) {
		t.Fatalf("ContentKey: %v, size %d", err, e.Size)
	}
	if kb, _, _ := b.ContentKey(ctx, "/f"); kb != ka {
		t.Fatalf("same bytes in another vault: key %s, want %s", kb, ka)
	}
	if _, err := a.WriteAt(ctx, "/f", 100<<10, []byte("x"), Meta{}); err != nil {
		t.Fatal(err)
	}
	if k, _, _ := a.ContentKey(ctx, "/f"); k == ka {
		t.Fatalf("changed bytes keep key %s", k)
	}
	if err := a.Truncate(ctx, "/f", 10, Meta{}); err != nil {
		t.Fatal(err)
	}
	k1, _, _ := a.ContentKey(ctx, "/f")
	if err := b.Truncate(ctx, "/f", 10, Meta{}); err != nil {
		t.Fatal(err)
	}
	if k2, _, _ := b.ContentKey(ctx, "/f"); k2 != k1 {
		t.Fatalf("same 10 bytes: keys %s and %s", k1, k2)
	}
	if _, _, err := a.ContentKey(ctx, "/"); !errors.Is(err, ErrIsDir) {
		t.Fatalf("ContentKey of a directory: %v, want ErrIsDir", err)
	}
}
