package vault

import (
	"strings"
	"unicode/utf8"
)

// Name and path limits. A name and a symlink target have Linux's limits;
// Linux limits the path of each call, not the depth of a tree, so a vault
// path (from the vault's root) may be far longer: MaxTreePathLen only
// bounds the work one path can cost.
const (
	MaxNameLen     = 255
	MaxPathLen     = 4096
	MaxTreePathLen = 1 << 20
)

// CleanPath validates a vault path and returns its components. A vault path
// is absolute ("/" is the root); "." and empty components are dropped, but
// ".." is rejected rather than resolved so that no spelling can escape or
// alias another path.
func CleanPath(p string) ([]string, error) {
	if p == "" || p[0] != '/' {
		return nil, pathErr("validate", p, ErrInvalidPath)
	}
	if len(p) > MaxTreePathLen || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
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
