package policy

import (
	"path"
	"strings"
)

// anyOutside reports whether any argument names a path outside workspace.
// An empty workspace disables the check.
func anyOutside(args []word, workspace string) bool {
	if workspace == "" {
		return false
	}
	for _, a := range args {
		for _, c := range pathCandidates(a.text) {
			if outside(c, workspace) {
				return true
			}
		}
	}
	return false
}

// pathCandidates returns the parts of an argument that may be paths: the
// argument itself, the value after the first '=' (`--out=/etc/x`,
// `of=/dev/sda`) and a short option's attached value (`-o/tmp/x`,
// `-I../inc`). URLs and scp-style `host:path` are not paths on this host.
func pathCandidates(arg string) []string {
	if strings.Contains(arg, "://") {
		return nil
	}
	out := []string{arg}
	if _, v, ok := strings.Cut(arg, "="); ok {
		out = append(out, v)
	}
	if len(arg) > 2 && arg[0] == '-' && arg[1] != '-' {
		out = append(out, arg[2:])
	}
	return out
}

// outside reports whether p, taken relative to the workspace root when it is
// not absolute, leaves workspace. Only path-like strings can: absolute paths,
// ~ (the home directory) and relative paths whose cleaned form starts with
// "..". A few device files and the shared /tmp are allowed everywhere since
// tools use them routinely and they hold nothing of the host's.
func outside(p, workspace string) bool {
	switch {
	case p == "":
		return false
	case p[0] == '~', p == "$HOME", p == "${HOME}",
		strings.HasPrefix(p, "$HOME/"), strings.HasPrefix(p, "${HOME}/"):
		return true
	case p[0] == '/':
		c := path.Clean(p)
		if sharedPath(c) {
			return false
		}
		return !within(c, workspace)
	default:
		c := path.Clean(p)
		return c == ".." || strings.HasPrefix(c, "../")
	}
}

// sharedPath reports whether the cleaned absolute path c is one of the host
// paths every command may use.
func sharedPath(c string) bool {
	switch c {
	case "/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr",
		"/dev/zero", "/dev/urandom", "/dev/random", "/tmp":
		return true
	}
	return strings.HasPrefix(c, "/tmp/")
}

func within(c, workspace string) bool {
	return workspace == "/" || c == workspace || strings.HasPrefix(c, workspace+"/")
}
