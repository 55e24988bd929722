package cli

import "testing"

func TestSnapshotAliasesAndGCDryRun(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "m")
	t.Setenv("AVFS_VAULT", "m")
	e.ok("write", "/a.txt", "one")
	e.ok("snapshot", "save", "s1", "-m", "first")
	if cp := e.ok("snapshot", "info", "s1")["checkpoint"].(map[string]any); cp["name"] != "s1" || cp["message"] != "first" {
		t.Fatalf("snapshot info: %v", cp)
	}
	e.fails(1, "CHECKPOINT_NOT_FOUND", "snapshot", "info", "nope", "--json")
	if l := e.ok("snapshot", "list")["checkpoints"].([]any); len(l) != 1 {
		t.Fatalf("snapshot list: %v", l)
	}
	e.ok("write", "/a.txt", "two")
	e.ok("snapshot", "restore", "s1")
	if c := e.ok("cat", "/a.txt"); c["content"] != "one" {
		t.Fatalf("after snapshot restore: %v", c)
	}
	e.ok("snapshot", "delete", "s1")
	// Pruning history leaves content nothing references: a dry run
	// counts it and frees nothing, gc then frees the same.
	e.ok("write", "/a.txt", "three")
	e.ok("prune", "--keep", "1")
	dry := e.ok("gc", "--dry-run")["would_free"].(map[string]any)
	again := e.ok("gc", "--dry-run")["would_free"].(map[string]any)
	freed := e.ok("gc")["freed"].(map[string]any)
	if dry["chunks"] == float64(0) || dry["chunks"] != again["chunks"] || freed["chunks"] != dry["chunks"] {
		t.Fatalf("gc --dry-run %v, again %v, then gc %v: want the same non-zero count", dry, again, freed)
	}
}
