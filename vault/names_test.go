package vault

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The name rules are written out instead of compiled as regular
// expressions at init; they must accept exactly what the expressions of
// the documentation accept.
func TestNameRulesMatchTheirExpressions(t *testing.T) {
	vaultRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	checkpointRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	alphabet := []rune("aZ09_-.:/ \n\x00é~")
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 131).Draw(t, "len")
		var b strings.Builder
		for range n {
			b.WriteRune(rapid.SampledFrom(alphabet).Draw(t, "c"))
		}
		s := b.String()
		if got, want := ValidVaultName(s) == nil, vaultRE.MatchString(s); got != want {
			t.Fatalf("ValidVaultName(%q) accepts: %v, the expression: %v", s, got, want)
		}
		if got, want := ValidCheckpointName(s) == nil, checkpointRE.MatchString(s); got != want {
			t.Fatalf("ValidCheckpointName(%q) accepts: %v, the expression: %v", s, got, want)
		}
	})
	for _, s := range []string{"a", "a.b", strings.Repeat("x", 128), strings.Repeat("x", 129), "-a", ".a", "a\n", ""} {
		if got, want := ValidCheckpointName(s) == nil, checkpointRE.MatchString(s); got != want {
			t.Errorf("ValidCheckpointName(%q) accepts: %v, the expression: %v", s, got, want)
		}
		if got, want := ValidVaultName(s) == nil, vaultRE.MatchString(s); got != want {
			t.Errorf("ValidVaultName(%q) accepts: %v, the expression: %v", s, got, want)
		}
	}
}
