package textdiff

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnifiedMatchesPatch checks each diff by applying it with patch(1).
func TestUnifiedMatchesPatch(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Fatalf("patch(1) is needed to check the diffs: %v", err)
	}
	lines := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(f(i) + "\n")
		}
		return b.String()
	}
	base := lines(40, func(i int) string { return "line " + string(rune('a'+i%26)) })
	cases := map[string][2]string{
		"one change":    {base, strings.Replace(base, "line c\n", "line C\n", 1)},
		"far apart":     {base, strings.Replace(strings.Replace(base, "line b\n", "B\n", 1), "line n\n", "", 1) + "tail\n"},
		"from empty":    {"", "new\nfile\n"},
		"to empty":      {"old\n", ""},
		"no newline":    {"a\nb", "a\nc"},
		"insert at top": {"x\ny\n", "w\nx\ny\n"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := Unified("a/f", "b/f", []byte(c[0]), []byte(c[1]))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			f := filepath.Join(dir, "f")
			os.WriteFile(f, []byte(c[0]), 0o644)
			cmd := exec.Command("patch", "-s", "-p1", "--no-backup-if-mismatch", "-i", "-", f)
			cmd.Stdin = strings.NewReader(d)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("patch: %v\n%s\ndiff:\n%s", err, out, d)
			}
			got, _ := os.ReadFile(f)
			if string(got) != c[1] {
				t.Fatalf("patched %q, want %q\ndiff:\n%s", got, c[1], d)
			}
		})
	}
	if d, _ := Unified("a", "b", []byte(base), []byte(base)); d != "" {
		t.Fatalf("equal texts: diff %q, want empty", d)
	}
}

func TestBinary(t *testing.T) {
	if !Binary([]byte("a\x00b")) || !Binary([]byte{0xff, 0xfe}) || Binary([]byte("héllo\n")) {
		t.Fatal("Binary: NUL and invalid UTF-8 are binary, UTF-8 text is not")
	}
}
