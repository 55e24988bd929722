package policy

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// DecodeRules reads rules as configuration files hold them (policy.rules:
// a list of maps) and checks each one; an error names the rule's position
// and name and the field at fault, such as
// `policy.rules[2] ("fetch"): unknown field "program" (did you mean "programs"?)`.
func DecodeRules(raw []map[string]any) ([]Rule, error) {
	fields := ruleFields()
	rules := make([]Rule, 0, len(raw))
	for i, m := range raw {
		name, _ := m["name"].(string)
		where := fmt.Sprintf("policy.rules[%d]", i)
		if name != "" {
			where += fmt.Sprintf(" (%q)", name)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !fields[k] {
				msg := fmt.Sprintf("%s: unknown field %q", where, k)
				if near := nearestField(k, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				return nil, fmt.Errorf("%w: %s; fields: %s", ErrInvalidRule, msg, strings.Join(sortedKeys(fields), ", "))
			}
		}
		var r Rule
		if err := mapstructure.Decode(m, &r); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRule, where, err)
		}
		if field, err := badField(r); err != nil {
			return nil, fmt.Errorf("%w: %s: field %s: %w", ErrInvalidRule, where, field, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ruleFields are the keys a rule may have (Rule's mapstructure tags).
func ruleFields() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(Rule{})
	for i := range t.NumField() {
		out[t.Field(i).Tag.Get("mapstructure")] = true
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// nearestField is the field sharing the longest prefix with k (programs
// for program, paths_outside for path_outside), if any shares three
// letters.
func nearestField(k string, fields map[string]bool) string {
	best, bestN := "", 2
	for f := range fields {
		n := 0
		for n < len(f) && n < len(k) && f[n] == k[n] {
			n++
		}
		if n > bestN || n == bestN && best != "" && f < best {
			best, bestN = f, n
		}
	}
	return best
}

// badField names the field of r that validRule would refuse, and why.
func badField(r Rule) (string, error) {
	probe := Rule{Name: r.Name, Action: AllowWithCheckpoint}
	if _, err := validRule(probe); err != nil {
		return "name", err
	}
	if _, err := ParseAction(string(r.Action)); err != nil {
		return "action", err
	}
	for field, list := range map[string][]string{"programs": r.Programs, "subcommands": r.Subcommands, "args": r.Args} {
		probe := Rule{Name: r.Name, Action: AllowWithCheckpoint}
		probe.Programs = list
		if _, err := validRule(probe); err != nil {
			return field, err
		}
	}
	return "", nil
}
