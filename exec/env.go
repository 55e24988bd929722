package exec

import (
	"slices"
	"strings"
)

// DefaultEnvAllow returns the host variables a command may inherit by
// default: locale, terminal and identity, plus the toolchain locations and
// settings that build tools need to find their caches. HOME is left out on
// purpose: the caller decides where a command's home is (usually inside the
// vault). A fresh slice is returned on every call, so callers may extend it.
func DefaultEnvAllow() []string {
	return []string{
		"PATH", "LANG", "LC_*", "TERM", "TZ", "USER", "LOGNAME",
		"RUSTUP_HOME", "CARGO_HOME",
		"GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY",
	}
}

// BuildEnv returns a complete environment for Spec.Env: the entries of host
// ("K=V", as from os.Environ) whose names are allowed, then set applied on
// top. An allow entry is an exact name or a prefix followed by "*" ("LC_*").
// Later host entries for the same name win, as in os/exec, and set wins
// over host. Entries without "=" and names that are empty or contain "="
// cannot be represented and are dropped. The result is sorted by name and
// has one entry per name.
func BuildEnv(allow []string, host []string, set map[string]string) []string {
	vars := make(map[string]string, len(set))
	for _, kv := range host {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || !allowed(allow, k) {
			continue
		}
		vars[k] = v
	}
	for k, v := range set {
		if k == "" || strings.Contains(k, "=") {
			continue
		}
		vars[k] = v
	}
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	env := make([]string, 0, len(names))
	for _, k := range names {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// allowed reports whether name matches one of the patterns. Matching is
// case-sensitive, as environment names are on Linux.
func allowed(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// lookupEnv returns the value of name in env, the last entry winning as it
// does when os/exec starts the process.
func lookupEnv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}
