package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHomeIsPrivate: whatever the umask, the home avfs creates is 0700
// and every file it writes there 0600; a home others can read is warned
// about.
func TestHomeIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	e := newEnv(t)
	e.home = filepath.Join(e.home, "fresh")
	t.Setenv("AVFS_HOME", e.home)
	e.ok("vault", "create", "v", "--json")
	e.ok("vault", "use", "v", "--json")
	e.ok("write", "/f", "secret", "--json")
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if m := mode(e.home); m != 0o700 {
		t.Errorf("home: mode %04o, want 0700", m)
	}
	for _, name := range []string{"store.db", "current-vault.json"} {
		if m := mode(filepath.Join(e.home, name)); m != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", name, m)
		}
	}
	if _, errs, code := e.run("", "ls", "/", "--json"); code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("private home: exit %d, stderr %q", code, errs)
	}
	if err := os.Chmod(e.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := e.run("", "ls", "/", "--json"); code != 0 || !strings.Contains(errs, "warning: home "+e.home+" has mode 0755") {
		t.Fatalf("readable home: exit %d, stderr %q, want a warning", code, errs)
	}
}

// TestNonUTF8NamesAreRefused: names that are not UTF-8 would reach the
// vault as U+FFFD and fold into one; they are refused before anything is
// written, from argv and from a host tree.
func TestNonUTF8NamesAreRefused(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "v", "--json")
	e.ok("vault", "use", "v", "--json")
	e.fails(1, "INVALID_PATH", "write", "/u\xff", "one", "--json")
	e.fails(1, "INVALID_PATH", "write", "/u\xfe", "two", "--json")
	e.fails(1, "INVALID_PATH", "mkdir", "/d\xff", "--json")
	e.ok("write", "/u\uFFFD", "a real U+FFFD is a name like any", "--json")

	host := t.TempDir()
	for name, content := range map[string]string{"ok.txt": "fine", "u\xff": "one", "u\xfe": "two"} {
		if err := os.WriteFile(filepath.Join(host, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	details := e.fails(1, "INVALID_PATH", "import", host, "/in", "--json")
	if paths, _ := details["paths"].([]any); len(paths) != 2 {
		t.Fatalf("import refusal names %v, want the 2 bad paths", details)
	}
	ls := e.ok("ls", "/", "--json")
	entries, _ := ls["entries"].([]any)
	if len(entries) != 1 {
		t.Fatalf("vault holds %v, want only the U+FFFD file", ls)
	}
}

// TestQuotaEntriesAgree: the CLI's quota set and vault create refuse the
// same values, with the largest accepted one in the message.
func TestQuotaEntriesAgree(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "v", "--json")
	e.ok("vault", "use", "v", "--json")
	for _, val := range []string{"-1", "8796093022208", "1099511627777"} {
		out, _, code := e.run("", "quota", "set", "max_size_mb", "--json", "--", val)
		if code != 1 || !strings.Contains(out, `"INVALID_ARGUMENT"`) || !strings.Contains(out, "1099511627776") {
			t.Errorf("quota set max_size_mb %s: exit %d %s", val, code, out)
		}
		out, _, code = e.run("", "vault", "create", "w", "--max-size-mb="+val, "--json")
		if code != 1 || !strings.Contains(out, `"INVALID_ARGUMENT"`) || !strings.Contains(out, "1099511627776") {
			t.Errorf("vault create --max-size-mb %s: exit %d %s", val, code, out)
		}
	}
	q := e.ok("quota", "--json")["quota"].(map[string]any)
	if q["max_size_mb"] != nil {
		t.Fatalf("refused values changed the quota: %v", q)
	}
	e.ok("quota", "set", "max_size_mb", "1099511627776", "--json")
	e.ok("write", "/f", "fits", "--json")
}

// TestRuntimeSettings: config show lists the fleet processes' runtime
// settings with their defaults, and a worker refuses values it cannot
// apply before it does anything. (A valid value is not applied here: it
// would change this test process's collector.)
func TestRuntimeSettings(t *testing.T) {
	e := newEnv(t)
	cfg := e.ok("config", "show", "--json")["config"].(map[string]any)
	if cfg["runtime.gc_percent"] != float64(25) || cfg["runtime.memory_limit_mb"] != float64(0) {
		t.Fatalf("runtime settings: gc_percent %v, memory_limit_mb %v, want 25 and 0", cfg["runtime.gc_percent"], cfg["runtime.memory_limit_mb"])
	}
	for _, yaml := range []string{"runtime:\n  gc_percent: 0\n", "runtime:\n  gc_percent: -1\n", "runtime:\n  memory_limit_mb: -1\n"} {
		if err := os.WriteFile(filepath.Join(e.home, "avfs.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"worker", "dispatcher", "serve"} {
			e.fails(1, "INVALID_ARGUMENT", cmd, "--nats", "nats://127.0.0.1:1", "--json")
		}
	}
}
