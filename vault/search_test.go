package vault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSearchIndexKeptByWrites(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "s", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "s")
	files := map[string]string{
		"/doc/a.md":    "the quick brown fox jumps over the lazy dog",
		"/doc/b.md":    "a fox, a fox, a fox in a box",
		"/src/c.go":    "package main // no animals here",
		"/bin/x.bin":   "fox\x00binary",
		"/doc/copy.md": "a fox, a fox, a fox in a box",
	}
	for p, c := range files {
		_, err := v.WriteFile(ctx, p, []byte(c), WriteOptions{Parents: true}, Meta{})
		must(t, err)
	}
	hits, err := v.Search(ctx, "fox", 0)
	must(t, err)
	paths := map[string]string{}
	for _, h := range hits {
		paths[h.Path] = h.Snippet
	}
	if len(hits) != 3 || paths["/doc/a.md"] == "" || paths["/doc/copy.md"] == "" {
		t.Fatalf("search fox: %+v, want a.md, b.md and copy.md (not the binary file)", hits)
	}
	if hits[0].Path != "/doc/b.md" && hits[0].Path != "/doc/copy.md" {
		t.Fatalf("search fox: best hit %s, want the file that says fox thrice", hits[0].Path)
	}
	if !strings.Contains(paths["/doc/a.md"], "[fox]") {
		t.Fatalf("snippet %q: want the match marked", paths["/doc/a.md"])
	}
	// A rewrite moves the file out of the results, in the same commit.
	_, err = v.WriteFile(ctx, "/doc/a.md", []byte("only cats now"), WriteOptions{}, Meta{})
	must(t, err)
	if hits, _ := v.Search(ctx, "fox", 0); len(hits) != 2 {
		t.Fatalf("after rewrite: %+v", hits)
	}
	if hits, _ := v.Search(ctx, "cats", 0); len(hits) != 1 || hits[0].Path != "/doc/a.md" {
		t.Fatalf("search cats: %+v", hits)
	}
	// A fork finds the same files without indexing anything.
	_, err = s.Fork(ctx, "default", "s", "f", "", Meta{})
	must(t, err)
	if hits, _ := s.Vault("default", "f").Search(ctx, "box", 0); len(hits) != 2 {
		t.Fatalf("fork search box: %+v", hits)
	}
	// No FTS5 query: searched for as a phrase (TestSearchPlainTextWithPunctuation).
	if hits, err := v.Search(ctx, `"unbalanced`, 0); err != nil || len(hits) != 0 {
		t.Fatalf("search \"unbalanced: %+v %v, want nothing found", hits, err)
	}
	n, err := v.Reindex(ctx, Meta{})
	must(t, err)
	if n != 5 {
		t.Fatalf("reindex looked at %d files, want 5", n)
	}
	// GC keeps the documents still held and drops the rest.
	must(t, s.Delete(ctx, "default", "f", Meta{}))
	_, err = v.Prune(ctx, 1, 0, false, Meta{})
	must(t, err)
	_, err = s.GC(ctx)
	must(t, err)
	var docs int
	must(t, s.db.QueryRow(`SELECT count(*) FROM fts_docs`).Scan(&docs))
	if docs != 3 {
		t.Fatalf("after gc: %d documents, want 3 (a.md now, b.md = copy.md, c.go)", docs)
	}
}

func TestGrepAndFind(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "g", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "g")
	big := strings.Repeat("filler line\n", 20000) + "needle at the end\n" // several chunks
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		for i := range 30 {
			if _, err := tx.WriteFile(fmt.Sprintf("/d%d/f%d.txt", i%3, i), []byte(fmt.Sprintf("one\nNeedle %d\nthree\n", i)), WriteOptions{Parents: true}); err != nil {
				return err
			}
		}
		if _, err := tx.WriteFile("/big.log", []byte(big), WriteOptions{}); err != nil {
			return err
		}
		_, err := tx.WriteFile("/bin.dat", []byte("needle\x00"), WriteOptions{})
		return err
	}))
	m, cut, err := v.Grep(ctx, "needle", "/", GrepOptions{})
	must(t, err)
	if cut || len(m) != 1 || m[0].Path != "/big.log" || m[0].Line != 20001 {
		t.Fatalf("grep needle: %+v cut %v, want /big.log:20001 only (binary skipped, case kept)", m, cut)
	}
	m, cut, err = v.Grep(ctx, "needle", "/d1", GrepOptions{IgnoreCase: true})
	must(t, err)
	if cut || len(m) != 10 || m[0].Line != 2 || !strings.HasPrefix(m[0].Path, "/d1/") {
		t.Fatalf("grep -i needle /d1: %d matches %+v", len(m), m)
	}
	if m, cut, _ := v.Grep(ctx, "(?i)needle", "/", GrepOptions{Limit: 5}); !cut || len(m) != 5 {
		t.Fatalf("grep -l 5: %d matches, cut %v", len(m), cut)
	}
	if _, _, err := v.Grep(ctx, "(", "/", GrepOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad regexp: %v", err)
	}

	es, err := v.Find(ctx, "/", FindOptions{Name: "f1*.txt", Kind: KindFile})
	must(t, err)
	if len(es) != 11 { // f1, f10..f19
		t.Fatalf("find --name f1*.txt: %d entries", len(es))
	}
	es, err = v.Find(ctx, "/", FindOptions{Kind: KindDir})
	must(t, err)
	if len(es) != 3 || es[0].Path != "/d0" {
		t.Fatalf("find --type d: %+v", es)
	}
	es, err = v.Find(ctx, "/", FindOptions{MinSize: 1000})
	must(t, err)
	if len(es) != 1 || es[0].Path != "/big.log" {
		t.Fatalf("find --min-size 1000: %+v", es)
	}
	es, err = v.Find(ctx, "/", FindOptions{MaxDepth: 1, MaxSize: 10})
	must(t, err)
	if len(es) != 4 { // bin.dat and the three directories (size 0)
		t.Fatalf("find --depth 1 --max-size 10: %+v", es)
	}
}

func TestIndexSkipsFileRemovedInItsTransaction(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	_, err := s.Create(ctx, "default", "r", Quota{}, Meta{})
	must(t, err)
	v := s.Vault("default", "r")
	// The mount commits a create and a remove of one file together.
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		if _, err := tx.WriteFile("/gone", []byte("text"), WriteOptions{}); err != nil {
			return err
		}
		return tx.Remove("/gone", RemoveOptions{})
	}))
	if hits, err := v.Search(ctx, "text", 0); err != nil || len(hits) != 0 {
		t.Fatalf("search after create+remove: %+v, %v", hits, err)
	}
}

// Text that is no FTS5 query is searched for as a phrase instead of
// failing with SQLite's parse error; FTS5 queries keep their meaning.
func TestSearchPlainTextWithPunctuation(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "s", Quota{})
	_, err := v.WriteFile(ctx, "/a.cc", []byte("std::vector<int> v; // see example.com and foo-bar"), WriteOptions{}, Meta{})
	must(t, err)
	_, err = v.WriteFile(ctx, "/b.txt", []byte("foo and bar, apart"), WriteOptions{}, Meta{})
	must(t, err)
	for _, q := range []string{"std::vector", "example.com", "foo-bar", `say "hi`} {
		hits, err := v.Search(ctx, q, 0)
		if err != nil {
			t.Fatalf("search %q: %v", q, err)
		}
		if q != `say "hi` && (len(hits) != 1 || hits[0].Path != "/a.cc") {
			t.Fatalf("search %q: %+v, want /a.cc", q, hits)
		}
	}
	// An FTS5 query still is one: both words, anywhere.
	if hits, err := v.Search(ctx, "foo AND bar", 0); err != nil || len(hits) != 2 {
		t.Fatalf("search foo AND bar: %+v %v, want both files", hits, err)
	}
}

// find describes entries as stat does: a directory's link count is 2
// plus its subdirectories, a hard-linked file's its names.
func TestFindGivesStatsLinkCounts(t *testing.T) {
	ctx := context.Background()
	v := newVault(t, openTestStore(t), "s", Quota{})
	must(t, v.Mkdir(ctx, "/d/e", 0o755, true, Meta{}))
	_, err := v.WriteFile(ctx, "/d/f", []byte("x"), WriteOptions{}, Meta{})
	must(t, err)
	found, err := v.Find(ctx, "/", FindOptions{})
	must(t, err)
	if len(found) != 3 {
		t.Fatalf("find: %+v", found)
	}
	for _, e := range found {
		st, err := v.Stat(ctx, e.Path)
		must(t, err)
		if e.Nlink != st.Nlink {
			t.Errorf("%s: find says nlink %d, stat %d", e.Path, e.Nlink, st.Nlink)
		}
	}
}
