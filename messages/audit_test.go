package messages

import "testing"

func TestAuditSubjects(t *testing.T) {
	if got := AuditSubject("ns", "v", "file.write"); got != "avfs.v1.audit.ns.v.file.write" {
		t.Fatalf("AuditSubject: %s", got)
	}
	if got := AuditMsgID("w1", 42); got != "w1-42" {
		t.Fatalf("AuditMsgID: %s", got)
	}
	for _, c := range []struct{ vault, action, want string }{
		{"v", "", "avfs.v1.audit.ns.v.>"},
		{"", "", "avfs.v1.audit.ns.*.>"},
		{"v", "file.", "avfs.v1.audit.ns.v.file.>"},
		{"v", "checkpoint.*", "avfs.v1.audit.ns.v.checkpoint.>"},
		{"v", "file.write", "avfs.v1.audit.ns.v.file.write"},
	} {
		if got := AuditFilterSubject("ns", c.vault, c.action); got != c.want {
			t.Errorf("AuditFilterSubject(%q, %q) = %s, want %s", c.vault, c.action, got, c.want)
		}
	}
	for _, c := range []struct {
		a            AuditArgs
		action, path string
		want         bool
	}{
		{AuditArgs{}, "file.write", "/a", true},
		{AuditArgs{Action: "file."}, "file.write", "/a", true},
		{AuditArgs{Action: "file.*"}, "dir.create", "/a", false},
		{AuditArgs{Action: "file.write"}, "file.write_at", "/a", false},
		{AuditArgs{Path: "/src"}, "file.write", "/src/a.go", true},
		{AuditArgs{Path: "/src/"}, "file.write", "/src", true},
		{AuditArgs{Path: "/src"}, "file.write", "/srcx", false},
	} {
		if got := c.a.Matches(c.action, c.path); got != c.want {
			t.Errorf("%+v.Matches(%s, %s) = %v", c.a, c.action, c.path, got)
		}
	}
}
