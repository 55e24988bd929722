package vault

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCleanPath: whatever the input, an accepted path has valid
// components that render back to a path meaning the same thing, no ".."
// survives, and no two different accepted spellings of distinct names
// fold into one (the components are the input's own bytes).
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "//a/./b/", "/a/../b", "a", "", "/u\xff", "/u\ufffd", "/" + strings.Repeat("x", 256), "/a\x00b", "/.", "/..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		comps, err := CleanPath(p)
		if err != nil {
			return
		}
		if !utf8.ValidString(p) || len(p) > MaxPathLen {
			t.Fatalf("accepted %q", p)
		}
		for _, c := range comps {
			if ValidName(c) != nil || c == ".." || c == "." || strings.ContainsAny(c, "/\x00") {
				t.Fatalf("%q: component %q", p, c)
			}
			if !strings.Contains(p, c) {
				t.Fatalf("%q: component %q is not the input's own text", p, c)
			}
		}
		again, err := CleanPath(JoinPath(comps))
		if err != nil || !slices.Equal(again, comps) {
			t.Fatalf("%q: %v renders as %q, which cleans to %v (%v)", p, comps, JoinPath(comps), again, err)
		}
	})
}
