package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
)

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
	if c := e.ok("cat", "/a.txt", "--json"); c["content"] != "one" {
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

// TestAutoCheckpointRetentionCLI: every exec with --checkpoint always
// takes an auto-checkpoint; the vault keeps the newest auto_keep of them,
// named checkpoints stay, and the config sets the default.
func TestAutoCheckpointRetentionCLI(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "r")
	t.Setenv("AVFS_VAULT", "r")
	e.ok("checkpoint", "save", "mine")
	if s := e.ok("vault", "settings")["settings"].(map[string]any); s["auto_keep"] != float64(50) || s["quota_mode"] != "logical" {
		t.Fatalf("default settings %v, want auto_keep 50 (config default), logical", s)
	}
	e.ok("vault", "set", "auto_keep", "2")
	for i := range 4 {
		if out, errs, code := e.run("", "exec", "--checkpoint", "always", "--json", "--", "sh", "-c", fmt.Sprintf("echo %d > n.txt", i)); code != 0 {
			t.Fatalf("exec %d: exit %d\n%s\n%s", i, code, out, errs)
		}
	}
	cps := e.ok("checkpoint", "list")["checkpoints"].([]any)
	var autos int
	for _, c := range cps {
		if c.(map[string]any)["auto"] == true {
			autos++
		}
	}
	if len(cps) != 3 || autos != 2 || cps[0].(map[string]any)["name"] != "mine" {
		t.Fatalf("checkpoints after 4 execs with auto_keep 2: %v", cps)
	}
	st := e.ok("stats")["vault"].(map[string]any)
	if st["auto_checkpoints"] != float64(2) || st["checkpoints"] != float64(3) {
		t.Fatalf("stats %v", st)
	}
	e.fails(1, "INVALID_ARGUMENT", "vault", "set", "auto_keep", "many", "--json")
	e.fails(1, "INVALID_ARGUMENT", "vault", "set", "colour", "blue", "--json")
	if s := e.ok("vault", "set", "auto_keep", "default")["settings"].(map[string]any); s["auto_keep"] != float64(50) {
		t.Fatalf("auto_keep default: %v", s)
	}
	// The configuration's default applies to vaults that set none.
	if err := os.WriteFile(filepath.Join(os.Getenv("AVFS_HOME"), "avfs.yaml"), []byte("checkpoints:\n  auto_keep: 1\nquota:\n  mode: unique\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := e.ok("vault", "settings")["settings"].(map[string]any); s["auto_keep"] != float64(1) || s["quota_mode"] != "unique" {
		t.Fatalf("settings under the config file: %v", s)
	}
	// A bad value in the file is a usage error before anything runs.
	if err := os.WriteFile(filepath.Join(os.Getenv("AVFS_HOME"), "avfs.yaml"), []byte("quota:\n  mode: fuzzy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.fails(2, "INVALID_ARGUMENT", "vault", "settings", "--json")
}

// TestForkTTLCLI: a fork made with --ttl shows its expiry, and the
// local process deletes it once the time passed (here: a 1 ns TTL, so
// the next command's open finds it expired).
func TestForkTTLCLI(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	v := e.ok("vault", "fork", "base", "short", "--ttl", "1ns")["vault"].(map[string]any)
	if v["expires_at"] == nil {
		t.Fatalf("fork --ttl: %v, want expires_at", v)
	}
	e.ok("vault", "fork", "base", "long", "--ttl", "24h")
	var names []string
	for _, x := range e.ok("vault", "list")["vaults"].([]any) {
		m := x.(map[string]any)
		names = append(names, m["name"].(string))
		if m["name"] == "long" && m["expires_at"] == nil {
			t.Fatalf("vault list: long has no expiry: %v", m)
		}
	}
	if strings.Join(names, ",") != "base,long" {
		t.Fatalf("vaults %v, want the expired fork gone", names)
	}
	e.fails(1, "VAULT_NOT_FOUND", "vault", "info", "short", "--json")
	e.fails(2, "INVALID_ARGUMENT", "vault", "fork", "base", "x", "--ttl", "soon", "--json")
	// ttl none keeps the vault.
	t.Setenv("AVFS_VAULT", "long")
	if s := e.ok("vault", "set", "ttl", "none")["settings"].(map[string]any); s["expires_at"] != nil {
		t.Fatalf("ttl none: %v", s)
	}
}

// TestQuotaModeCLI: in unique mode a copy costs nothing against
// max_size_mb, and the error says which mode counted.
func TestQuotaModeCLI(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "q", "--max-size-mb", "1")
	t.Setenv("AVFS_VAULT", "q")
	dir := t.TempDir()
	src := filepath.Join(dir, "a.bin")
	blob := make([]byte, 700<<10)
	r := rand.New(rand.NewPCG(1, 2)) // no two 64 KiB chunks alike
	for i := range blob {
		blob[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(src, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("import", dir, "/")
	d := e.fails(1, "QUOTA_EXCEEDED", "cp", "/a.bin", "/b.bin", "--json")
	if det := d; det["mode"] != "logical" {
		t.Fatalf("logical details %v", det)
	}
	e.ok("vault", "set", "quota_mode", "unique")
	e.ok("cp", "/a.bin", "/b.bin")
	q := e.ok("quota")
	if q["mode"] != "unique" || q["usage"].(map[string]any)["unique_bytes"] != float64(len(blob)) {
		t.Fatalf("quota %v", q)
	}
	d = e.fails(1, "QUOTA_EXCEEDED", "write", "/c.txt", strings.Repeat("new content ", 40000), "--json")
	if det := d; det["mode"] != "unique" || det["current"] != float64(len(blob)) {
		t.Fatalf("unique details %v", det)
	}
	e.fails(1, "INVALID_ARGUMENT", "vault", "set", "quota_mode", "fuzzy", "--json")
}

// TestStatsCompactMaintainAuditClear: the maintenance verbs as a user
// runs them in-process.
func TestStatsCompactMaintainAuditClear(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "m")
	t.Setenv("AVFS_VAULT", "m")
	e.ok("write", "/a.txt", strings.Repeat("x", 100000))
	e.ok("write", "/a.txt", "small")
	e.ok("history", "set", "--keep", "1")
	// Without a vault, stats is the store's alone.
	t.Setenv("AVFS_VAULT", "")
	s := e.ok("stats")
	if s["vault"] != nil || s["store"].(map[string]any)["vaults"] != float64(1) {
		t.Fatalf("store stats %v", s)
	}
	t.Setenv("AVFS_VAULT", "m")
	s = e.ok("stats")
	if v := s["vault"].(map[string]any); v["files"] != float64(1) || v["logical_bytes"] != float64(5) || v["unique_bytes"] != float64(5) {
		t.Fatalf("vault stats %v", v)
	}
	if o := s["store"].(map[string]any)["orphans"].(map[string]any); o["bytes"].(float64) < 100000 {
		t.Fatalf("orphans %v, want the pruned version's content", o)
	}
	_, errs, code := e.run("", "maintain", "--json")
	if code != 0 || !strings.Contains(errs, "compact") {
		t.Fatalf("maintain: exit %d, progress %q", code, errs)
	}
	if o := e.ok("stats")["store"].(map[string]any)["orphans"].(map[string]any); o["bytes"] != float64(0) {
		t.Fatalf("orphans after maintain %v", o)
	}
	if c := e.ok("compact"); c["after_bytes"].(float64) <= 0 {
		t.Fatalf("compact %v", c)
	}
	// audit clear: the last minute always stays.
	if r := e.ok("audit", "clear", "--before", "0s"); r["events"] != float64(0) {
		t.Fatalf("audit clear of the last minute: %v", r)
	}
	e.fails(2, "INVALID_ARGUMENT", "audit", "clear", "--json")
	e.fails(1, "INVALID_ARGUMENT", "audit", "clear", "--before", "someday", "--json")
	if r := e.ok("audit", "clear", "--before", "2099-01-01T00:00:00Z", "--dry-run"); r["dry_run"] != true {
		t.Fatalf("dry run %v", r)
	}
}

// TestMaintenanceThroughServe: with `avfs serve` running on the home,
// the maintenance verbs go to the current vault's worker, and the
// server's worker deletes a fork once its TTL passed.
func TestMaintenanceThroughServe(t *testing.T) {
	e := newEnv(t)
	startServe(t, e, "w-maint")
	e.ok("vault", "create", "s")
	e.ok("vault", "fork", "s", "brief", "--ttl", "1s")
	e.fails(1, "INVALID_ARGUMENT", "stats", "--json") // a fleet has a store per worker: name a vault
	t.Setenv("AVFS_VAULT", "s")
	if st := e.ok("stats"); st["vault"].(map[string]any)["name"] != "s" || st["store"].(map[string]any)["vaults"].(float64) < 1 {
		t.Fatalf("stats through serve: %v", st)
	}
	if c := e.ok("compact"); c["after_bytes"].(float64) <= 0 {
		t.Fatalf("compact through serve: %v", c)
	}
	if m := e.ok("maintain"); m["vaults"].(float64) < 1 {
		t.Fatalf("maintain through serve: %v", m)
	}
	poll.Until(t, 60*time.Second, "the expired fork swept", func() (bool, error) {
		out, _, code := e.run("", "vault", "info", "brief", "--json")
		if code == 1 && strings.Contains(out, "VAULT_NOT_FOUND") {
			return true, nil
		}
		return false, fmt.Errorf("vault info brief: exit %d %s", code, out)
	})
}

// startServe runs `avfs serve --id ID` on e's home until the test ends,
// and returns once it is up.
func startServe(t *testing.T, e *env, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--id", id}, strings.NewReader(""), io.Discard, io.Discard, Options{})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	poll.Until(t, 20*time.Second, "serve came up", func() (bool, error) { return runningServe(e.home) != "", nil })
}
