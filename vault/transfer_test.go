package vault

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"path/filepath"
	"testing"
)

// moveByHash sends vault ns/name from src to dst the way workers do:
// manifest, then only the chunks dst lacks. It returns how many chunks
// it had to send.
func moveByHash(t *testing.T, src, dst *Store, ns, name string, replace bool) int {
	t.Helper()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "manifest.db")
	if _, err := src.ExportManifest(ctx, ns, name, file); err != nil {
		t.Fatal(err)
	}
	hs, err := ManifestChunks(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := dst.MissingChunks(ctx, hs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[Hash][]byte{}
	for _, h := range missing {
		data, err := src.Chunk(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		got[h] = data
	}
	if err := AddChunks(ctx, file, got); err != nil {
		t.Fatal(err)
	}
	// A GC between the fetch and the import (another vault's delete, say)
	// must not free what was fetched.
	if _, err := dst.GC(ctx); err != nil {
		t.Fatal(err)
	}
	imp := dst.Import
	if replace {
		imp = dst.Receive
	}
	if _, err := imp(ctx, file, ns, name, Meta{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return len(missing)
}

func TestMoveByHashSendsOnlyMissingChunks(t *testing.T) {
	ctx := context.Background()
	a, b := openTestStore(t), openTestStore(t)
	if _, err := a.Create(ctx, "ns", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	v := a.Vault("ns", "v")
	big := bytes.Repeat([]byte("avfs chunk data "), 3*ChunkSize/16) // 3 chunks, all alike
	big[ChunkSize] = 'X'                                            // now 2 distinct
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		_, err := tx.WriteFile("/big", big, WriteOptions{})
		return err
	}))
	if _, err := v.WriteFile(ctx, "/small", []byte("hello"), WriteOptions{}, Meta{RequestID: "req-1"}); err != nil {
		t.Fatal(err)
	}
	if n := moveByHash(t, a, b, "ns", "v", false); n != 3 {
		t.Fatalf("first move sent %d chunks, want 3 (2 of big + small)", n)
	}
	if got, want := treeOf(t, b.Vault("ns", "v")), treeOf(t, v); !maps.Equal(got, want) {
		t.Fatalf("moved tree differs:\n got %v\nwant %v", got, want)
	}
	// The request log travels: the write is known on b.
	if _, ok, err := b.StoredResult(ctx, RequestKey{Namespace: "ns", Vault: "v", ID: "req-1", Op: "file.write"}); err != nil || !ok {
		t.Fatalf("request log not moved: ok=%v err=%v", ok, err)
	}
	// Its history is not new: nothing for the audit stream.
	evs, err := b.AuditSince(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Action != "vault.import" && e.Action != "vault.received" {
			t.Fatalf("imported history offered to the audit stream: %+v", e)
		}
	}

	// One small change: moving again sends one chunk and replaces b's copy.
	if _, err := v.WriteFile(ctx, "/small", []byte("hello again"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if n := moveByHash(t, a, b, "ns", "v", true); n != 1 {
		t.Fatalf("second move sent %d chunks, want 1", n)
	}
	data, _, err := b.Vault("ns", "v").ReadFile(ctx, "/small")
	if err != nil || string(data) != "hello again" {
		t.Fatalf("replaced copy reads %q, %v", data, err)
	}
}

func TestManifestWithoutChunksDoesNotImport(t *testing.T) {
	ctx := context.Background()
	a, b := openTestStore(t), openTestStore(t)
	if _, err := a.Create(ctx, "ns", "v", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Vault("ns", "v").WriteFile(ctx, "/f", []byte("content"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "m.db")
	if _, err := a.ExportManifest(ctx, "ns", "v", file); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Import(ctx, file, "ns", "v", Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("import without chunks: %v, want ErrInvalidArgument", err)
	}
	if ok, _ := b.Vault("ns", "v").Exists(ctx); ok {
		t.Fatal("a failed import left a vault behind")
	}
	if err := AddChunks(ctx, file, map[Hash][]byte{{1}: []byte("not that")}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("chunk with a wrong hash: %v, want ErrInvalidArgument", err)
	}
}

func TestUnsentAndStoreID(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	hs := []Hash{{1}, {2}}
	must(t, s.MarkSent(ctx, "r1", hs[:1]))
	got, err := s.Unsent(ctx, "r1", hs)
	if err != nil || len(got) != 1 || got[0] != hs[1] {
		t.Fatalf("unsent to r1 = %v, %v", got, err)
	}
	if got, _ := s.Unsent(ctx, "r2", hs); len(got) != 2 {
		t.Fatalf("unsent to another remote = %v", got)
	}
	id1, err := s.ID(ctx)
	if err != nil || id1 == "" {
		t.Fatal(id1, err)
	}
	if id2, _ := s.ID(ctx); id2 != id1 {
		t.Fatalf("store id changed: %s then %s", id1, id2)
	}
	if id3, _ := openTestStore(t).ID(ctx); id3 == id1 {
		t.Fatal("two stores share an id")
	}
}
