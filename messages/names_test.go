package messages

import (
	"regexp"
	"strings"
	"testing"
)

// ValidName is written out instead of compiled as a regular expression at
// init; it must accept exactly what the documented expression accepts.
func TestValidNameMatchesItsExpression(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	cases := []string{"", "a", "A-b_c", "-a", "_a", "a.b", "a b", "a\n", "é", strings.Repeat("z", 128), strings.Repeat("z", 129), "9", "a-"}
	for c := byte(0); c < 128; c++ {
		cases = append(cases, string([]byte{c}), "a"+string([]byte{c}))
	}
	for _, s := range cases {
		if got, want := ValidName(s), re.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, the expression says %v", s, got, want)
		}
	}
}
