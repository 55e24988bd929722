package cli

import "testing"

// TestHardLinkCommand: avfs ln makes a second name of a file, which shows
// the same inode and a link count of 2; a write through either name is
// read through the other; a directory cannot be linked.
func TestHardLinkCommand(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "w")
	e.ok("vault", "use", "w")
	e.ok("write", "/build/app", "v1", "-p")
	e.ok("mkdir", "/release")
	r := e.ok("ln", "/build/app", "/release/app")
	if r["path"] != "/release/app" || r["from"] != "/build/app" {
		t.Fatalf("ln: %v", r)
	}
	a, b := e.ok("stat", "/build/app"), e.ok("stat", "/release/app")
	if a["ino"] != b["ino"] || a["nlink"] != float64(2) || b["nlink"] != float64(2) {
		t.Fatalf("stat after ln: %v, %v", a, b)
	}
	e.ok("write", "/release/app", "v2")
	if got := e.ok("cat", "/build/app", "--json")["content"]; got != "v2" {
		t.Fatalf("cat through the other name: %v", got)
	}
	e.fails(1, "ALREADY_EXISTS", "ln", "/build/app", "/release/app")
	e.fails(1, "PERMISSION_DENIED", "ln", "/build", "/b2")
	e.ok("rm", "/build/app")
	if got := e.ok("stat", "/release/app")["nlink"]; got != float64(1) {
		t.Fatalf("nlink after removing one name: %v", got)
	}
}
