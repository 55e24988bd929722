package mount

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSetParam: a module parameter is written only when it differs, and a
// kernel without it is left alone. The files stand in for
// /sys/module/fuse/parameters (the real one is the machine's, shared by
// every test process; e2e's TestMountWakesServersHere writes it).
func TestSetParam(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "wake_here")
	if err := os.WriteFile(p, []byte("N\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := setParam(p, "Y"); err != nil || !changed {
		t.Fatalf("N → Y: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "Y" {
		t.Fatalf("after: %q", b)
	}
	if changed, err := setParam(p, "Y"); err != nil || changed {
		t.Fatalf("Y again: changed %v, %v", changed, err)
	}
	if changed, err := setParam(filepath.Join(dir, "missing"), "Y"); err != nil || changed {
		t.Fatalf("no such parameter: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("a missing parameter was created: %v", err)
	}
}
