package vault

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
)

func TestLabelsKeptByForkCheckpointAndExport(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "l", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "l")
	_, err = v.WriteFile(ctx, "/src/a.go", []byte("a"), WriteOptions{Parents: true}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/src/b.go", []byte("b"), WriteOptions{}, Meta{})
	must(t, err)
	l, err := v.Label(ctx, "/src/a.go", []string{"reviewed", "hot"}, nil, map[string]string{"owner": "ana"}, nil, Meta{})
	must(t, err)
	if !reflect.DeepEqual(l.Tags, []string{"hot", "reviewed"}) || l.Meta["owner"] != "ana" {
		t.Fatalf("labels: %+v", l)
	}
	_, err = v.SaveCheckpoint(ctx, "cp", "", false, Meta{})
	must(t, err)
	_, err = s.Fork(ctx, "default", "l", "f", "", Meta{})
	must(t, err)
	// Changing the labels after the checkpoint and fork touches neither.
	_, err = v.Label(ctx, "/src/a.go", nil, []string{"hot"}, map[string]string{"owner": "bo"}, nil, Meta{})
	must(t, err)
	_, fl, err := s.Vault("default", "f").Labels(ctx, "/src/a.go")
	must(t, err)
	if len(fl.Tags) != 2 || fl.Meta["owner"] != "ana" {
		t.Fatalf("fork's labels changed with its parent's: %+v", fl)
	}
	// A write and a rename keep them.
	_, err = v.WriteFile(ctx, "/src/a.go", []byte("a2"), WriteOptions{}, Meta{})
	must(t, err)
	must(t, v.Rename(ctx, "/src/a.go", "/src/c.go", RenameOptions{}, Meta{}))
	_, got, err := v.Labels(ctx, "/src/c.go")
	must(t, err)
	if !reflect.DeepEqual(got.Tags, []string{"reviewed"}) || got.Meta["owner"] != "bo" {
		t.Fatalf("after write and rename: %+v", got)
	}
	es, err := v.Find(ctx, "/", FindOptions{Tags: []string{"reviewed"}, Meta: map[string]string{"owner": "bo"}})
	must(t, err)
	if len(es) != 1 || es[0].Path != "/src/c.go" {
		t.Fatalf("find --tag reviewed --meta owner=bo: %+v", es)
	}
	if es, _ := v.Find(ctx, "/", FindOptions{Tags: []string{"hot"}}); len(es) != 0 {
		t.Fatalf("find --tag hot after untag: %+v", es)
	}
	_, err = v.RestoreCheckpoint(ctx, "cp", Meta{})
	must(t, err)
	if _, got, _ := v.Labels(ctx, "/src/a.go"); len(got.Tags) != 2 || got.Meta["owner"] != "ana" {
		t.Fatalf("after restore: %+v, want the checkpoint's labels", got)
	}
	file := filepath.Join(t.TempDir(), "l.avfs")
	_, err = s.Export(ctx, "default", "l", file)
	must(t, err)
	_, err = s.Import(ctx, file, "default", "l2", Meta{})
	must(t, err)
	if _, got, _ := s.Vault("default", "l2").Labels(ctx, "/src/a.go"); len(got.Tags) != 2 || got.Meta["owner"] != "ana" {
		t.Fatalf("after export and import: %+v", got)
	}
	_, err = s.GC(ctx)
	must(t, err)
	if _, got, _ := s.Vault("default", "f").Labels(ctx, "/src/a.go"); len(got.Tags) != 2 {
		t.Fatalf("gc dropped a fork's labels: %+v", got)
	}
	if _, err := v.Label(ctx, "/src/a.go", []string{"a=b"}, nil, nil, nil, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("tag with '=': %v", err)
	}
}
