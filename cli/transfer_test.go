package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestForkReplyLeavesStoredBytesToInfo(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "base")
	e.ok("write", "/a.txt", "alpha", "--vault", "base")
	f := e.ok("vault", "fork", "base", "child", "--json")["vault"].(map[string]any)
	if sb, ok := f["stored_bytes"]; !ok || sb != nil {
		t.Fatalf("fork reply stored_bytes = %v (present %v), want null: computing it walks the tree", sb, ok)
	}
	in := e.ok("vault", "info", "child", "--json")["vault"].(map[string]any)
	if in["stored_bytes"] != float64(5) {
		t.Fatalf("vault info stored_bytes = %v, want 5", in["stored_bytes"])
	}
}

func TestImportOverQuotaIsRefusedWhole(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "q", "--max-size-mb", "1")
	src := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(strings.Repeat(name, 400<<10)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code := e.run("", "import", src, "--vault", "q", "--json")
	if code != 1 || !strings.Contains(out, `"QUOTA_EXCEEDED"`) || !strings.Contains(out, "needs 1228800 bytes") {
		t.Fatalf("import of 1.2 MB into a 1 MB vault: exit %d\n%s\nwant QUOTA_EXCEEDED saying what it needs in bytes", code, out)
	}
	if ls := e.ok("ls", "/", "--vault", "q"); len(ls["entries"].([]any)) != 0 {
		t.Fatalf("refused import left entries: %v", ls)
	}
}
