package vault

import (
	"context"
	"path/filepath"
	"testing"
)

// TestChangeLog: a change made through another Store on the same file
// (as another process would) moves the vault's change sequence and shows
// up in its log with its paths; the writer knows its own sequence number.
func TestChangeLog(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "store.db")
	a, err := Open(ctx, file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	va := newVault(t, a, "v", Quota{})
	vb := b.Vault("default", "v")
	start, err := vb.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var own int64
	if err := va.Update(ctx, Meta{}, func(tx *Tx) error {
		own = tx.Seq()
		_, err := tx.WriteFile("/a.txt", []byte("one"), WriteOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := va.Rename(ctx, "/a.txt", "/b.txt", RenameOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	pos, err := vb.LogPos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pos.Vault != start.Vault || pos.Seq != start.Seq+2 || own != start.Seq+1 {
		t.Fatalf("log position %+v after %+v, own write %d: want two steps, the first ours", pos, start, own)
	}
	es, err := vb.Log(ctx, pos.Vault, start.Last, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Seq != own || es[0].Path != "/a.txt" || es[1].Action != "rename" || es[1].To != "/b.txt" || es[1].ID != pos.Last {
		t.Fatalf("log: %+v, want the write then the rename to /b.txt", es)
	}
}
