package vault

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func versionsOf(t testing.TB, v *Vault, p string) []int64 {
	t.Helper()
	vs, err := v.Versions(context.Background(), p, 0)
	must(t, err)
	out := make([]int64, len(vs))
	for i, x := range vs {
		out[i] = x.Version
	}
	return out
}

func readVersion(t testing.TB, v *Vault, p string, n int64) string {
	t.Helper()
	data, _, err := v.ReadVersion(context.Background(), p, n)
	must(t, err)
	return string(data)
}

func TestHistoryRecordsEachCommittedWrite(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "h", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "h")
	for _, c := range []string{"one\n", "two\n", "three\n"} {
		_, err := v.WriteFile(ctx, "/f.txt", []byte(c), WriteOptions{}, Meta{})
		must(t, err)
	}
	_, err = v.WriteAt(ctx, "/f.txt", 0, []byte("T"), Meta{})
	must(t, err)
	must(t, v.Truncate(ctx, "/f.txt", 3, Meta{}))
	// Several writes in one transaction are one version.
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		if _, err := tx.WriteFile("/f.txt", []byte("a"), WriteOptions{}); err != nil {
			return err
		}
		_, err := tx.WriteAt("/f.txt", 1, []byte("b"))
		return err
	}))
	vs, err := v.Versions(ctx, "/f.txt", 0)
	must(t, err)
	if len(vs) != 6 || vs[0].Version != 1 || vs[5].Version != 6 {
		t.Fatalf("log: %+v, want versions 1..6", vs)
	}
	want := []string{"one\n", "two\n", "three\n", "Three\n", "Thr", "ab"}
	for i, w := range want {
		if got := readVersion(t, v, "/f.txt", int64(i+1)); got != w {
			t.Fatalf("version %d = %q, want %q", i+1, got, w)
		}
		if vs[i].Size != int64(len(w)) {
			t.Fatalf("version %d size %d, want %d", i+1, vs[i].Size, len(w))
		}
	}
	if vs[0].Hash == vs[1].Hash || len(vs[0].Hash) != 64 {
		t.Fatalf("hashes %q %q: want distinct SHA-256 hex", vs[0].Hash, vs[1].Hash)
	}
	if last, _ := v.Versions(ctx, "/f.txt", 2); len(last) != 2 || last[1].Version != 6 {
		t.Fatalf("log -n 2: %+v", last)
	}

	// Checkout writes an old version back as a new one; revert undoes it.
	_, got, err := v.Checkout(ctx, "/f.txt", 2, Meta{})
	must(t, err)
	if data, _, _ := v.ReadFile(ctx, "/f.txt"); string(data) != "two\n" || got.Version != 2 {
		t.Fatalf("checkout -v 2: file %q, version %d", data, got.Version)
	}
	_, _, err = v.Revert(ctx, "/f.txt", Meta{})
	must(t, err)
	if data, _, _ := v.ReadFile(ctx, "/f.txt"); string(data) != "ab" {
		t.Fatalf("revert: %q, want the version before the checkout (ab)", data)
	}
	if got := versionsOf(t, v, "/f.txt"); len(got) != 8 {
		t.Fatalf("after checkout and revert: versions %v, want 8", got)
	}
	if _, _, err := v.ReadVersion(ctx, "/f.txt", 99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("version 99: %v, want ErrNotFound", err)
	}
	if _, _, err := v.Revert(ctx, "/none", Meta{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revert of a path without history: %v, want ErrNotFound", err)
	}
}

func TestHistoryRetentionPruneAndGC(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"), Options{Now: func() time.Time { return now }})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.Create(ctx, "default", "r", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "r")
	write := func(c string) {
		t.Helper()
		_, err := v.WriteFile(ctx, "/f", []byte(c), WriteOptions{}, Meta{})
		must(t, err)
		now = now.Add(time.Minute)
	}
	for _, c := range []string{"v1", "v2", "v3", "v4", "v5"} {
		write(c)
	}
	dry, err := v.Prune(ctx, 2, 0, true, Meta{})
	must(t, err)
	if dry.Versions != 3 || !dry.DryRun || len(versionsOf(t, v, "/f")) != 5 {
		t.Fatalf("prune --keep 2 --dry-run: %+v, versions %v", dry, versionsOf(t, v, "/f"))
	}
	r, err := v.Prune(ctx, 2, 0, false, Meta{})
	must(t, err)
	if got := versionsOf(t, v, "/f"); r.Versions != 3 || len(got) != 2 || got[0] != 4 {
		t.Fatalf("prune --keep 2: %+v, versions %v, want [4 5]", r, got)
	}
	// GC frees the content only the pruned versions held.
	gc, err := s.GC(ctx)
	must(t, err)
	if gc.Chunks != 3 {
		t.Fatalf("gc after prune freed %d chunks, want 3 (v1..v3)", gc.Chunks)
	}
	if got := readVersion(t, v, "/f", 4); got != "v4" {
		t.Fatalf("version 4 after gc: %q", got)
	}

	// Settings: keep 3 and a coalescing window of 90 s.
	_, err = v.SetHistory(ctx, HistorySettings{Keep: 3, Coalesce: 90 * time.Second}, Meta{})
	must(t, err)
	write("v6") // one minute after v5's version: folds into it
	write("v7") // v5's version is two minutes old now: a new version
	if got := versionsOf(t, v, "/f"); len(got) != 3 || got[2] != 6 {
		t.Fatalf("with coalescing: versions %v, want [4 5 6]", got)
	}
	if got := readVersion(t, v, "/f", 5); got != "v6" {
		t.Fatalf("coalesced version 5 = %q, want v6", got)
	}
	write("v8") // folds into version 6
	write("v9") // version 7; keep 3 drops version 4
	if got := versionsOf(t, v, "/f"); len(got) != 3 || got[0] != 5 || got[2] != 7 {
		t.Fatalf("keep 3: versions %v, want [5 6 7]", got)
	}
	r, err = v.Prune(ctx, 0, 90*time.Second, false, Meta{})
	must(t, err)
	if got := versionsOf(t, v, "/f"); len(got) != 1 {
		t.Fatalf("prune --older-than 90s: %+v, versions %v, want only the latest", r, got)
	}
	if _, err := v.Prune(ctx, 0, 0, false, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("prune without limits: %v, want ErrInvalidArgument", err)
	}
}

func TestHistoryForkSharesUpToForkPoint(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "base", Quota{}, Meta{})
	must(t, err)
	base := s.Vault("default", "base")
	for _, c := range []string{"b1", "b2"} {
		_, err := base.WriteFile(ctx, "/f", []byte(c), WriteOptions{}, Meta{})
		must(t, err)
	}
	_, err = s.Fork(ctx, "default", "base", "child", "", Meta{})
	must(t, err)
	child := s.Vault("default", "child")
	_, err = base.WriteFile(ctx, "/f", []byte("b3"), WriteOptions{}, Meta{})
	must(t, err)
	_, err = child.WriteFile(ctx, "/f", []byte("c3"), WriteOptions{}, Meta{})
	must(t, err)
	if got := versionsOf(t, child, "/f"); len(got) != 3 || got[2] != 3 {
		t.Fatalf("child versions %v, want [1 2 3]", got)
	}
	if got := readVersion(t, child, "/f", 3); got != "c3" {
		t.Fatalf("child version 3 = %q, want its own write", got)
	}
	if got := readVersion(t, child, "/f", 1); got != "b1" {
		t.Fatalf("child version 1 = %q, want the parent's", got)
	}
	if got := readVersion(t, base, "/f", 3); got != "b3" {
		t.Fatalf("base version 3 = %q: the fork's write leaked into its parent", got)
	}
	// Pruning the parent keeps what the fork shares; deleting the parent
	// too, and GC leaves the shared content.
	_, err = base.Prune(ctx, 1, 0, false, Meta{})
	must(t, err)
	must(t, s.Delete(ctx, "default", "base", Meta{}))
	if got := readVersion(t, child, "/f", 1); got != "b1" {
		t.Fatalf("after the parent's prune, delete and gc: child version 1 = %q", got)
	}
	// A fork of a checkpoint shares history up to the checkpoint.
	_, err = child.SaveCheckpoint(ctx, "cp", "", false, Meta{})
	must(t, err)
	_, err = child.WriteFile(ctx, "/f", []byte("c4"), WriteOptions{}, Meta{})
	must(t, err)
	_, err = s.Fork(ctx, "default", "child", "grand", "cp", Meta{})
	must(t, err)
	if got := versionsOf(t, s.Vault("default", "grand"), "/f"); len(got) != 3 {
		t.Fatalf("fork of a checkpoint: versions %v, want the 3 made before it", got)
	}
	// Once no vault shares them, the versions go.
	must(t, s.Delete(ctx, "default", "grand", Meta{}))
	must(t, s.Delete(ctx, "default", "child", Meta{}))
	var left int
	must(t, s.db.QueryRow(`SELECT count(*) FROM versions`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d versions left after every vault was deleted", left)
	}
}

func TestHistoryOfImport(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "i", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "i")
	host := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(host, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(host, "d/x"), []byte("x1"), 0o644))
	_, err = v.ImportDir(ctx, host, "/", Meta{})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(host, "d/x"), []byte("x2"), 0o644))
	_, err = v.ImportDir(ctx, host, "/", Meta{})
	must(t, err)
	if got := readVersion(t, v, "/d/x", 1); got != "x1" || len(versionsOf(t, v, "/d/x")) != 2 {
		t.Fatalf("import history: v1 %q, versions %v", got, versionsOf(t, v, "/d/x"))
	}
}
