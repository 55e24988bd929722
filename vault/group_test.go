package vault

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
)

// Concurrent writers share commits (group.go). Whatever the grouping,
// every acknowledged write is stored, once, and survives a reopen; a
// write refused in the middle of a group (over quota) leaves nothing,
// and takes nothing of the others with it; a retried request id is
// answered from its stored result.
func TestConcurrentWritersKeepExactlyWhatWasAcknowledged(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/store.db"
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const vaults, writers, each, maxFiles = 4, 16, 30, 50
	limit := int64(maxFiles)
	for v := 0; v < vaults; v++ {
		if _, err := s.Create(ctx, "ns", fmt.Sprintf("v%d", v), Quota{MaxFiles: &limit}, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	acked := map[string][]string{} // vault → paths acknowledged
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			name := fmt.Sprintf("v%d", w%vaults)
			for i := 0; i < each; i++ {
				p := fmt.Sprintf("/w%d-%d", w, i)
				meta := Meta{RequestID: fmt.Sprintf("r-%d-%d", w, i), ArgsHash: p}
				r, err := s.Vault("ns", name).WriteFile(ctx, p, []byte(p), WriteOptions{}, meta)
				if errors.Is(err, ErrQuota) {
					continue
				}
				if err != nil {
					t.Errorf("write %s %s: %v", name, p, err)
					return
				}
				// The same request again: its stored result, not a second write.
				r2, err := s.Vault("ns", name).WriteFile(ctx, p, []byte("other"), WriteOptions{}, meta)
				if err != nil || r2 != r {
					t.Errorf("retry of %s: %+v, %v; want %+v", meta.RequestID, r2, err, r)
					return
				}
				mu.Lock()
				acked[name] = append(acked[name], p)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	check := func(s *Store, when string) {
		t.Helper()
		for v := 0; v < vaults; v++ {
			name := fmt.Sprintf("v%d", v)
			want := append([]string(nil), acked[name]...)
			sort.Strings(want)
			if len(want) != maxFiles {
				t.Errorf("%s: %d writes acknowledged, want the quota's %d", name, len(want), maxFiles)
			}
			es, err := s.Vault("ns", name).ReadDir(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range es {
				got = append(got, "/"+e.Name)
				b, _, err := s.Vault("ns", name).ReadFile(ctx, "/"+e.Name)
				if err != nil || string(b) != "/"+e.Name {
					t.Errorf("%s: %s holds %q (%v), want its own path", when, e.Name, b, err)
				}
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: vault %s holds %v, want the acknowledged %v", when, name, got, want)
			}
		}
	}
	check(s, "after the writes")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "after a reopen")
}

// SetMetas stores every key, the later value of a key replacing the
// earlier.
func TestSetMetasStoresEveryKey(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	if err := s.SetMetas(ctx, map[string]string{"a": "1", "b": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMetas(ctx, map[string]string{"b": "3", "c": "4"}); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1", "b": "3", "c": "4"} {
		got, ok, err := s.Meta(ctx, k)
		if err != nil || !ok || got != want {
			t.Errorf("meta %s: %q, %v, %v; want %q", k, got, ok, err, want)
		}
	}
}

// TestBatchedWritesCommitWithTheBatch: writes made with a Batch (a
// takeover replaying a change log) are kept once the batch commits, a
// read in the batch sees the batch's earlier writes, and one write the
// vault refuses (quota) leaves the batch's other writes in. Until the
// batch commits, another connection to the store sees none of the
// writes of its open group.
func TestBatchedWritesCommitWithTheBatch(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/store.db"
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limit := int64(300)
	if _, err := s.Create(ctx, "ns", "v", Quota{MaxFiles: &limit}, Meta{}); err != nil {
		t.Fatal(err)
	}
	v := s.Vault("ns", "v")
	b := &Batch{}
	bctx := WithBatch(ctx, b)
	for i := 0; i < 300; i++ {
		if _, err := v.WriteFile(bctx, fmt.Sprintf("/f%03d", i), []byte(fmt.Sprint(i)), WriteOptions{}, Meta{}); err != nil {
			t.Fatalf("batched write %d: %v", i, err)
		}
	}
	other, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.Vault("ns", "v").ReadFile(ctx, "/f299"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another connection read /f299 of the open batch: %v, want ErrNotFound", err)
	}
	if _, err := v.WriteFile(bctx, "/over", []byte("x"), WriteOptions{}, Meta{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("write over the quota in a batch: %v, want ErrQuota", err)
	}
	got, _, err := v.ReadFile(bctx, "/f299")
	if err != nil || string(got) != "299" {
		t.Fatalf("read in the batch of its own write: %q, %v", got, err)
	}
	if _, err := v.WriteFile(bctx, "/f000", []byte("again"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(b); err != nil {
		t.Fatalf("commit: %v", err)
	}
	for _, f := range []struct{ path, want string }{{"/f000", "again"}, {"/f150", "150"}, {"/f299", "299"}} {
		got, _, err := other.Vault("ns", "v").ReadFile(ctx, f.path)
		if err != nil || string(got) != f.want {
			t.Fatalf("%s after the commit, read by another connection: %q, %v; want %q", f.path, got, err, f.want)
		}
	}
}
