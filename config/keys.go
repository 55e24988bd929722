package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/viper"
)

// Kind is how a configuration key's value reads.
type Kind int

const (
	KindScalar   Kind = iota // a string, number or bool
	KindDuration             // a Go duration: 300s, 1h30m
	KindList                 // a list (exec.env_allow, policy.rules)
	KindMap                  // a map whose sub-keys are free (telemetry.headers)
)

// Keys returns every key Config knows, dotted ("exec.timeout"), with its
// kind. It is read from Config's mapstructure tags, so a new field is a
// known key at once.
func Keys() map[string]Kind {
	out := map[string]Kind{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if tag == "" && strings.Contains(opts, "squash") && f.Type.Kind() == reflect.Struct {
				walk(prefix, f.Type) // its fields are the parent's
				continue
			}
			if tag == "" || tag == "-" {
				continue
			}
			key := prefix + tag
			switch {
			case f.Type == reflect.TypeOf(time.Duration(0)):
				out[key] = KindDuration
			case f.Type.Kind() == reflect.Struct:
				walk(key+".", f.Type)
			case f.Type.Kind() == reflect.Slice:
				out[key] = KindList
			case f.Type.Kind() == reflect.Map:
				out[key] = KindMap
			default:
				out[key] = KindScalar
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return out
}

// Validate refuses keys that Config does not know (a typo such as
// exec.timout would otherwise be ignored), naming the nearest known key.
func Validate(v *viper.Viper) error {
	known := Keys()
	var bad []string
	for _, k := range v.AllKeys() {
		if _, ok := known[k]; ok {
			continue
		}
		if parent, _, ok := cutLast(k); ok && underMap(known, parent) {
			continue
		}
		msg := fmt.Sprintf("unknown key %q", k)
		if near := nearest(k, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		bad = append(bad, msg)
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	where := v.ConfigFileUsed()
	if where == "" {
		where = "config"
	}
	return fmt.Errorf("%s: %s", where, strings.Join(bad, "; "))
}

// underMap reports whether key is, or lies below, a map-valued key.
func underMap(known map[string]Kind, key string) bool {
	for {
		if known[key] == KindMap {
			return true
		}
		parent, _, ok := cutLast(key)
		if !ok {
			return false
		}
		key = parent
	}
}

func cutLast(k string) (string, string, bool) {
	i := strings.LastIndexByte(k, '.')
	if i < 0 {
		return "", k, false
	}
	return k[:i], k[i+1:], true
}

// nearest is the known key closest to k by edit distance, if it is close
// enough to be a typo of it.
func nearest(k string, known map[string]Kind) string {
	best, bestD := "", len(k)/2+2
	for c := range known {
		if d := Distance(k, c); d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Display is Show with durations as durations ("5m0s", not 300000000000).
func Display(v *viper.Viper) map[string]any {
	out := Show(v)
	for k, kind := range Keys() {
		if kind == KindDuration {
			if _, ok := out[k]; ok {
				out[k] = v.GetDuration(k).String()
			}
		}
	}
	return out
}
