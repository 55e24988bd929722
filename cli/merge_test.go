package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestVaultMerge(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	e.ok("write", "/a.txt", "1\n2\n3\n4\n5\n", "--vault", "base")
	e.ok("write", "/b.txt", "b\n", "--vault", "base")
	e.ok("vault", "fork", "base", "f")
	e.ok("write", "/a.txt", "1\n2\n3\n4\nfive\n", "--vault", "f")
	e.ok("write", "/new.txt", "n", "--vault", "f")
	e.ok("write", "/a.txt", "one\n2\n3\n4\n5\n", "--vault", "base")
	cat := func(v, p string) string {
		t.Helper()
		out, errs, code := e.run("", "cat", p, "--vault", v)
		if code != 0 {
			t.Fatalf("cat %s: exit %d %s", p, code, errs)
		}
		return out
	}

	r := e.ok("vault", "merge", "f", "--dry-run")
	if r["applied"] != false || r["into"] != "base" || r["checkpoint"] != "" || len(r["changes"].(map[string]any)["added"].([]any)) != 1 {
		t.Fatalf("dry run: %v", r)
	}
	if got := cat("base", "/a.txt"); got != "one\n2\n3\n4\n5\n" {
		t.Fatalf("a dry run changed /a.txt: %q", got)
	}

	r = e.ok("vault", "merge", "f")
	if r["applied"] != true || r["checkpoint"] == "" || len(r["merged"].([]any)) != 1 || len(r["conflicts"].([]any)) != 0 {
		t.Fatalf("merge: %v", r)
	}
	if got := cat("base", "/a.txt"); got != "one\n2\n3\n4\nfive\n" {
		t.Fatalf("merged /a.txt: %q", got)
	}
	if got := cat("base", "/new.txt"); got != "n" {
		t.Fatalf("/new.txt after the merge: %q", got)
	}
	undo := r["checkpoint"].(string)

	// Both change /b.txt's one line: a conflict, and nothing applied.
	e.ok("write", "/b.txt", "ours\n", "--vault", "base")
	e.ok("write", "/b.txt", "theirs\n", "--vault", "f")
	e.ok("write", "/c.txt", "c", "--vault", "f")
	d := e.fails(1, "MERGE_CONFLICT", "vault", "merge", "f", "--into", "base")
	cs := d["conflicts"].([]any)
	if len(cs) != 1 {
		t.Fatalf("conflicts: %v", cs)
	}
	c := cs[0].(map[string]any)
	if c["path"] != "/b.txt" || c["kind"] != "content" || c["hunks"] != float64(1) || c["base"] == "" || c["ours"] == c["theirs"] || c["ours_type"] != "file" {
		t.Fatalf("conflict: %v", c)
	}
	if _, _, code := e.run("", "stat", "/c.txt", "--vault", "base"); code == 0 {
		t.Fatal("a merge with a conflict applied /c.txt")
	}
	r = e.ok("vault", "merge", "f", "--strategy", "theirs", "--paths", "/b.txt")
	if got := cat("base", "/b.txt"); got != "theirs\n" || r["conflicts"].([]any)[0].(map[string]any)["resolved"] != "theirs" {
		t.Fatalf("--strategy theirs: /b.txt %q, %v", got, r)
	}
	if _, _, code := e.run("", "stat", "/c.txt", "--vault", "base"); code == 0 {
		t.Fatal("--paths /b.txt merged /c.txt")
	}

	// Undo: the checkpoint of the first merge.
	e.ok("checkpoint", "restore", undo, "--vault", "base")
	if got := cat("base", "/a.txt"); got != "one\n2\n3\n4\n5\n" {
		t.Fatalf("after the restore of %s: %q", undo, got)
	}

	e.fails(2, "INVALID_ARGUMENT", "vault", "merge", "f", "--strategy", "mine")
	e.fails(1, "INVALID_ARGUMENT", "vault", "merge", "base") // not a fork
	e.fails(1, "VAULT_NOT_FOUND", "vault", "merge", "nope", "--into", "base")
}

func TestAttemptsMergeBest(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	e.ok("write", "/a.txt", "a\n", "--vault", "base")
	cmds := filepath.Join(t.TempDir(), "cmds")
	os.WriteFile(cmds, []byte("exit 1\necho fixed > fix.txt\n"), 0o644)
	r := e.ok("attempts", "run", "--from", "base", "--commands", cmds, "--merge", "best", "--keep", "none")
	m, ok := r["merge"].(map[string]any)
	if !ok || m["applied"] != true || r["merge_error"] != nil || m["fork"] != r["best"] {
		t.Fatalf("--merge best: %v", r)
	}
	out, _, code := e.run("", "cat", "/fix.txt", "--vault", "base")
	if code != 0 || out != "fixed\n" {
		t.Fatalf("the best attempt's file in base: exit %d %q", code, out)
	}
	if n := len(e.ok("vault", "list")["vaults"].([]any)); n != 1 {
		t.Fatalf("--keep none left %d vaults, want base only", n)
	}

	// No attempt exits 0: nothing to merge, exit status 1, base unchanged.
	os.WriteFile(cmds, []byte("echo no > no.txt; exit 3\n"), 0o644)
	out, _, code = e.run("", "attempts", "run", "--from", "base", "--commands", cmds, "--merge", "best", "--json")
	var doc struct {
		Merge      any `json:"merge"`
		MergeError struct {
			Code string `json:"code"`
		} `json:"merge_error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 1 || doc.Merge != nil || doc.MergeError.Code != "NOT_FOUND" {
		t.Fatalf("--merge best with no success: exit %d, %v\n%s", code, err, out)
	}
	if _, _, code := e.run("", "stat", "/no.txt", "--vault", "base"); code == 0 {
		t.Fatal("a failed attempt was merged")
	}
	e.fails(2, "INVALID_ARGUMENT", "attempts", "run", "--from", "base", "--merge", "all", "--", "true")
}
