package vault

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRequestLogIsScopedToTheVault(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	for _, k := range [][2]string{{"team-a", "v"}, {"team-b", "v"}, {"team-a", "w"}} {
		if _, err := s.Create(ctx, k[0], k[1], Quota{}, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	write := func(ns, name, p, content, hash string) error {
		_, err := s.Vault(ns, name).WriteFile(ctx, p, []byte(content), WriteOptions{}, Meta{RequestID: "job-1", ArgsHash: hash})
		return err
	}
	read := func(ns, name, p string) string {
		b, _, err := s.Vault(ns, name).ReadFile(ctx, p)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	if err := write("team-a", "v", "/f", "a's", "h-a"); err != nil {
		t.Fatal(err)
	}
	// The same id in another namespace, and in another vault of the same
	// namespace, is another request: it is applied, not answered with a's.
	if err := write("team-b", "v", "/f", "b's", "h-b"); err != nil {
		t.Fatal(err)
	}
	if err := write("team-a", "w", "/f", "w's", "h-w"); err != nil {
		t.Fatal(err)
	}
	if got := read("team-b", "v", "/f"); got != "b's" {
		t.Fatalf("team-b's write under team-a's id: %q, want it applied", got)
	}
	if got := read("team-a", "w", "/f"); got != "w's" {
		t.Fatalf("a write to another vault under a used id: %q, want it applied", got)
	}
	// The same id and arguments again: replayed, once.
	if err := write("team-a", "v", "/f", "a's", "h-a"); err != nil {
		t.Fatalf("replay: %v", err)
	}
	// Other arguments, or another op, under a used id: CONFLICT, and the
	// vault is left as it was.
	if err := write("team-a", "v", "/g", "other", "h-other"); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, other args: %v, want ErrConflict", err)
	}
	if err := s.Vault("team-a", "v").Mkdir(ctx, "/d", 0o755, false, Meta{RequestID: "job-1"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, other op: %v, want ErrConflict", err)
	}
	if got := read("team-a", "v", "/g"); got == "other" {
		t.Fatal("a conflicting request was applied")
	}
	// The stored-result API (exec) follows the same rules.
	k := RequestKey{Namespace: "team-a", Vault: "v", ID: "run-1", Op: "exec.run", ArgsHash: "x"}
	if err := s.StoreResult(ctx, k, []byte(`{"stdout":"secret"}`)); err != nil {
		t.Fatal(err)
	}
	other := k
	other.Namespace = "team-b"
	if _, ok, err := s.StoredResult(ctx, other); err != nil || ok {
		t.Fatalf("team-b sees team-a's result: ok=%v err=%v", ok, err)
	}
	other = k
	other.ArgsHash = "y"
	if _, _, err := s.StoredResult(ctx, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, other args: %v, want ErrConflict", err)
	}
	if b, ok, err := s.StoredResult(ctx, k); err != nil || !ok || string(b) != `{"stdout":"secret"}` {
		t.Fatalf("own result: %q ok=%v err=%v", b, ok, err)
	}
}

// TestOldRequestLogIsMigrated opens a store whose request log is keyed by
// request id alone, as stores before the scoped log were.
func TestOldRequestLogIsMigrated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "ns", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Vault("ns", "v").WriteFile(ctx, "/f", []byte("one"), WriteOptions{}, Meta{RequestID: "old-1"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE requests_old(request_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, vault TEXT NOT NULL, op TEXT NOT NULL, result BLOB NOT NULL, created_at INTEGER NOT NULL)`,
		`INSERT INTO requests_old SELECT request_id, namespace, vault, op, result, created_at FROM requests`,
		`DROP TABLE requests`,
		`ALTER TABLE requests_old RENAME TO requests`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("old store does not open: %v", err)
	}
	defer s.Close()
	v := s.Vault("ns", "v")
	// The old entry still answers its retry, whatever its arguments.
	if _, err := v.WriteFile(ctx, "/f", []byte("two"), WriteOptions{}, Meta{RequestID: "old-1", ArgsHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := v.ReadFile(ctx, "/f"); string(b) != "one" {
		t.Fatalf("retry of an old request applied again: %q", b)
	}
	// And the migrated log is scoped: the id is free in another vault.
	if _, err := s.Create(ctx, "ns", "w", Quota{}, Meta{RequestID: "old-1"}); err != nil {
		t.Fatalf("old id in another vault: %v", err)
	}
}

func TestStoreFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "home")
	s, err := Open(context.Background(), filepath.Join(dir, "store.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create(context.Background(), "ns", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{dir: 0o700, "store.db": 0o600, "store.db-wal": 0o600, "store.db-shm": 0o600}
	for name, m := range want {
		p := name
		if name != dir {
			p = filepath.Join(dir, name)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != m {
			t.Errorf("%s: mode %04o, want %04o", name, st.Mode().Perm(), m)
		}
	}
}
