package vault

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
)

func openTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "store.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestWriteCheckpointForkRestore(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if _, err := s.Create(ctx, "default", "a", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("default", "a")
	if _, err := v.WriteFile(ctx, "/src/lib.rs", []byte("fn a() {}"), WriteOptions{Parents: true}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SaveCheckpoint(ctx, "base", "", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "/src/lib.rs", []byte("fn b() {}"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "/new.txt", []byte("x"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "a", "b", "", Meta{}); err != nil {
		t.Fatal(err)
	}
	r, err := v.RestoreCheckpoint(ctx, "base", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Changes.Added) != 1 || r.Changes.Added[0].Path != "/new.txt" || len(r.Changes.Modified) != 1 {
		t.Fatalf("restore changes = %+v", r.Changes)
	}
	got, _, err := v.ReadFile(ctx, "/src/lib.rs")
	if err != nil || !bytes.Equal(got, []byte("fn a() {}")) {
		t.Fatalf("after restore got %q, %v", got, err)
	}
	if _, err := v.Stat(ctx, "/new.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat new.txt after restore: %v, want not found", err)
	}
	b := s.Vault("default", "b")
	got, _, err = b.ReadFile(ctx, "/src/lib.rs")
	if err != nil || string(got) != "fn b() {}" {
		t.Fatalf("fork got %q, %v", got, err)
	}
	if err := s.Delete(ctx, "default", "a", Meta{}); err != nil {
		t.Fatal(err)
	}
	got, _, err = b.ReadFile(ctx, "/src/lib.rs")
	if err != nil || string(got) != "fn b() {}" {
		t.Fatalf("fork after parent delete got %q, %v", got, err)
	}
}
