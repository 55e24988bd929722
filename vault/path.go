package vault

import (
	"strings"
	"unicode/utf8"
)

// Name and path limits, as Linux enforces them on real file systems.
const (
	MaxNameLen = 255
	MaxPathLen = 4096
)

// CleanPath validates a vault path and returns its components. A vault path
// is absolute ("/" is the root); "." and empty components are dropped, but
// ".." is rejected rather than resolved so that no spelling can escape or
// alias another path.
func CleanPath(p string) ([]string, error) {
	if p == "" || p[0] != '/' {
		return nil, pathErr("validate", p, ErrInvalidPath)
	}
	if len(p) > MaxPathLen || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return nil, pathErr("validate", p, ErrInvalidPath)
	}
	var comps []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, pathErr("validate", p, ErrInvalidPath)
		}
		if err := ValidName(c); err != nil {
			return nil, pathErr("validate", p, ErrInvalidPath)
		}
		comps = append(comps, c)
	}
	return comps, nil
}

// ValidName reports whether name can be one directory entry.
func ValidName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > MaxNameLen ||
		strings.ContainsAny(name, "/\x00") || !utf8.ValidString(name) {
		return ErrInvalidPath
	}
	return nil
}

// JoinPath renders components as an absolute vault path.
func JoinPath(comps []string) string {
	if len(comps) == 0 {
		return "/"
	}
	return "/" + strings.Join(comps, "/")
}
