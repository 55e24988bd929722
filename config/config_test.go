package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestLayering(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "avfs.yaml"), []byte("namespace: fromfile\nexec:\n  timeout: 7s\nnats:\n  password: hunter2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AVFS_HOME", home)
	t.Setenv("AVFS_EXEC_GRACE", "2s")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("home", "", "")
	fs.String("vault", "", "")
	fs.String("namespace", "", "")
	fs.String("nats", "", "")
	fs.String("config", "", "")
	if err := fs.Parse([]string{"--vault", "v1"}); err != nil {
		t.Fatal(err)
	}
	c, v, err := Load(fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Home != home || c.Namespace != "fromfile" || c.Vault != "v1" || c.Exec.Timeout != 7*time.Second || c.Exec.Grace != 2*time.Second {
		t.Fatalf("got home=%q ns=%q vault=%q timeout=%v grace=%v", c.Home, c.Namespace, c.Vault, c.Exec.Timeout, c.Exec.Grace)
	}
	if got := Show(v)["nats.password"]; got != "***" {
		t.Fatalf("config show printed the password: %v", got)
	}
}

func TestNoFileWorks(t *testing.T) {
	t.Setenv("AVFS_HOME", t.TempDir())
	c, _, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "default" || c.Exec.Timeout != 300*time.Second || c.Approvals.TTL != time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestBadExplicitFile(t *testing.T) {
	t.Setenv("AVFS_HOME", t.TempDir())
	t.Setenv("AVFS_CONFIG", filepath.Join(t.TempDir(), "missing.yaml"))
	if _, _, err := Load(nil); err == nil {
		t.Fatal("a missing explicit config file was ignored")
	}
}

func TestSandboxSection(t *testing.T) {
	home := t.TempDir()
	yaml := "sandbox:\n  mode: namespaces\n  binds: [/data, /cache:rw]\n  memory_mb: 512\n  vaults:\n    - {vault: Net-Vault, network: true, pids: 64}\n"
	if err := os.WriteFile(filepath.Join(home, "avfs.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AVFS_HOME", home)
	t.Setenv("AVFS_SANDBOX_FALLBACK", "true")
	c, _, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sandbox
	if s.Mode != "namespaces" || !s.Fallback || len(s.Binds) != 2 || s.Binds[1] != "/cache:rw" || s.Limits.MemoryMB != 512 || s.TmpSizeMB != 1024 {
		t.Fatalf("sandbox: %+v", s)
	}
	if len(s.Vaults) != 1 || s.Vaults[0].Vault != "Net-Vault" || !s.Vaults[0].Network || s.Vaults[0].Limits.Pids != 64 {
		t.Fatalf("sandbox vaults: %+v", s.Vaults)
	}
}

// TestFleetTimings: the defaults are the failover figures the README
// states (heartbeat 1 s, members TTL 5 s) with a daily chunk sweep, and
// timings that would take live workers for dead are refused.
func TestFleetTimings(t *testing.T) {
	cfg, _, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := cfg.Fleet; f.Heartbeat != time.Second || f.MemberTTL != 5*time.Second || f.GCInterval != 24*time.Hour {
		t.Fatalf("fleet defaults %+v, want heartbeat 1s, member_ttl 5s, gc_interval 24h", f)
	}
	if err := cfg.Fleet.Check(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, bad := range []Fleet{
		{Heartbeat: 0, MemberTTL: time.Second},
		{Heartbeat: time.Second, MemberTTL: 1500 * time.Millisecond},
		{Heartbeat: time.Second, MemberTTL: 5 * time.Second, GCInterval: -time.Second},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (Fleet{Heartbeat: 200 * time.Millisecond, MemberTTL: time.Second}).Check(); err != nil {
		t.Errorf("a fast fleet's timings refused: %v", err)
	}
}

// A relative home is where the working directory says, as an absolute
// path: exec's mounts and the keeper need one.
func TestRelativeHomeIsMadeAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("AVFS_HOME", "h")
	c, v, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "h")
	if c.Home != want || Show(v)["home"] != want || c.StorePath() != filepath.Join(want, "store.db") {
		t.Fatalf("home %q, shown %v, store %q; want %q", c.Home, Show(v)["home"], c.StorePath(), want)
	}
}

// --home "" (a script's unset variable) is refused, not the default home.
func TestEmptyHomeFlagIsRefused(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("home", "", "")
	if err := fs.Parse([]string{"--home", ""}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(fs); err == nil || !strings.Contains(err.Error(), "--home is empty") {
		t.Fatalf("Load with --home \"\": %v, want a refusal", err)
	}
}
