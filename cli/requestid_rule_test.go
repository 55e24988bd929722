package cli

import (
	"regexp"
	"strings"
	"testing"
)

// validRequestID is written out instead of compiled as a regular
// expression at init; it must accept exactly what the documented
// expression accepts.
func TestRequestIDRuleMatchesItsExpression(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	cases := []string{"", "a", "a.b:c-d_e", ":a", ".a", "a b", "a*", "a>", "a\n", strings.Repeat("r", 128), strings.Repeat("r", 129)}
	for c := byte(0); c < 128; c++ {
		cases = append(cases, string([]byte{c}), "a"+string([]byte{c}))
	}
	for _, s := range cases {
		if got, want := validRequestID(s), re.MatchString(s); got != want {
			t.Errorf("validRequestID(%q) = %v, the expression says %v", s, got, want)
		}
	}
}
