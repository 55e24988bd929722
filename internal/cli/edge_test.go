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
