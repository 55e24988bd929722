package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// treeOf reads every entry of a vault into path -> "kind:mode:content".
func treeOf(t testing.TB, v *Vault) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		es, err := v.ReadDir(ctx, p)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		for _, e := range es {
			switch e.Kind {
			case KindDir:
				out[e.Path] = fmt.Sprintf("dir:%o", e.Mode)
				walk(e.Path)
			case KindSymlink:
				out[e.Path] = "symlink:" + e.Target
			default:
				data, _, err := v.ReadFile(ctx, e.Path)
				if err != nil {
					t.Fatalf("read %s: %v", e.Path, err)
				}
				out[e.Path] = fmt.Sprintf("file:%o:%s", e.Mode, data)
			}
		}
	}
	walk("/")
	return out
}

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := openTestStore(t)
	if _, err := src.Create(ctx, "default", "a", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	v := src.Vault("default", "a")
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: several chunks
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		if _, err := tx.WriteFile("/src/big.bin", big, WriteOptions{Parents: true}); err != nil {
			return err
		}
		if _, err := tx.WriteFile("/run.sh", []byte("#!/bin/sh\n"), WriteOptions{Mode: 0o755}); err != nil {
			return err
		}
		return tx.Symlink("src/big.bin", "/link")
	}))
	if _, err := v.SaveCheckpoint(ctx, "one", "first", false, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteFile(ctx, "/src/new.txt", []byte("after"), WriteOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	want := treeOf(t, v)

	file := filepath.Join(t.TempDir(), "a.avfs")
	res, err := src.Export(ctx, "default", "a", file)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(file); err != nil || st.Size() != res.Bytes {
		t.Fatalf("export file: %v, size %d, result %d", err, st.Size(), res.Bytes)
	}
	if _, err := os.Stat(file + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("export left a side file: %v", err)
	}

	dst := openTestStore(t)
	if _, err := dst.Create(ctx, "default", "other", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Import(ctx, file, "default", "b", Meta{}); err != nil {
		t.Fatal(err)
	}
	b := dst.Vault("default", "b")
	got := treeOf(t, b)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("imported tree\n got %v\nwant %v", got, want)
	}
	if _, err := b.RestoreCheckpoint(ctx, "one", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/src/new.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after restoring imported checkpoint: %v, want not found", err)
	}
	if _, err := dst.Import(ctx, file, "default", "b", Meta{}); !errors.Is(err, ErrVaultExists) {
		t.Fatalf("second import: %v, want ErrVaultExists", err)
	}
	if _, err := dst.Import(ctx, filepath.Join(t.TempDir(), "nope"), "default", "c", Meta{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("import of missing file: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
