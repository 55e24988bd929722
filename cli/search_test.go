package cli

import "testing"

func TestSearchGrepFindTree(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "s")
	t.Setenv("AVFS_VAULT", "s")
	e.ok("write", "/src/main.go", "package main\n// TODO: parse the config\n", "-p")
	e.ok("write", "/src/util/x.go", "package util\n", "-p")
	e.ok("write", "/README.md", "How to parse a config file.\n")
	hits := e.ok("search", "parse AND config")["hits"].([]any)
	if len(hits) != 2 {
		t.Fatalf("search: %v, want main.go and README.md", hits)
	}
	if h := e.ok("search", "util", "--rebuild")["hits"].([]any); len(h) != 1 {
		t.Fatalf("search util --rebuild: %v, want x.go", h)
	}
	m := e.ok("grep", "-i", "todo", "/src")["matches"].([]any)
	if len(m) != 1 || m[0].(map[string]any)["line"] != float64(2) {
		t.Fatalf("grep -i todo /src: %v", m)
	}
	if g := e.ok("grep", "package", "-l", "1"); g["truncated"] != true {
		t.Fatalf("grep -l 1: %v", g)
	}
	es := e.ok("find", "/src", "--name", "*.go", "--type", "f")["entries"].([]any)
	if len(es) != 2 {
		t.Fatalf("find --name *.go: %v", es)
	}
	if es := e.ok("find", "--depth", "1")["entries"].([]any); len(es) != 2 {
		t.Fatalf("find --depth 1: %v", es)
	}
	e.fails(1, "INVALID_ARGUMENT", "find", "--type", "x", "--json")
	e.fails(1, "INVALID_ARGUMENT", "grep", "(", "--json")
	tr := e.ok("tree", "-L", "2")["entries"].([]any)
	if len(tr) != 4 || tr[3].(map[string]any)["path"] != "/src/util" {
		t.Fatalf("tree -L 2: %v, want README.md, src, src/main.go, src/util (not x.go)", tr)
	}
	if p := e.ok("pwd"); p["vault"] != "s" || p["path"] != "/" {
		t.Fatalf("pwd: %v", p)
	}
}

func TestTagsAndMetaInFind(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "t")
	t.Setenv("AVFS_VAULT", "t")
	e.ok("write", "/a.go", "a")
	e.ok("write", "/b.go", "b")
	if l := e.ok("tag", "/a.go", "reviewed", "hot"); len(l["tags"].([]any)) != 2 {
		t.Fatalf("tag: %v", l)
	}
	e.ok("untag", "/a.go", "hot")
	e.ok("meta", "/a.go", "owner=ana", "status=draft")
	e.ok("meta", "/a.go", "--unset", "status")
	l := e.ok("meta", "/a.go")
	if m := l["meta"].(map[string]any); len(m) != 1 || m["owner"] != "ana" || len(l["tags"].([]any)) != 1 {
		t.Fatalf("meta: %v", l)
	}
	e.ok("vault", "fork", "t", "t2")
	es := e.ok("find", "--tag", "reviewed", "--meta", "owner=ana", "--vault", "t2")["entries"].([]any)
	if len(es) != 1 || es[0].(map[string]any)["path"] != "/a.go" {
		t.Fatalf("find --tag --meta in the fork: %v", es)
	}
	e.fails(1, "INVALID_ARGUMENT", "meta", "/a.go", "novalue", "--json")
	e.fails(1, "NOT_FOUND", "tag", "/none", "x", "--json")
}
