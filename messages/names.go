package messages

import (
	"encoding/json"
)

// ValidName reports whether s can name a namespace or a vault: 1-128 of
// [A-Za-z0-9_-], starting with a letter or digit. Such a name is always
// one subject token and one key token; the vault package applies the same
// rule to the vaults it creates. Written out rather than as the regular
// expression ^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$, whose compilation at
// package init cost every avfs command a few hundred µs.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-') {
			continue
		}
		return false
	}
	return true
}

// CheckRouting returns the INVALID_ARGUMENT error of a request that can
// never succeed whoever serves it, because it names a namespace, a vault
// or a fork target no vault can have ("" vault is a namespace-scoped
// request). Dispatchers and workers answer it at once, before placing or
// running it, so it is never retried or dead-lettered.
func CheckRouting(ns, vault string, op Op, body []byte) *Error {
	if !ValidName(ns) {
		return Errorf(CodeInvalidArgument, "namespace %q: want 1-128 of [A-Za-z0-9_-], starting with a letter or digit", ns)
	}
	if vault != "" && !ValidName(vault) {
		return Errorf(CodeInvalidArgument, "vault %q: want 1-128 of [A-Za-z0-9_-], starting with a letter or digit", vault)
	}
	if op == OpVaultFork {
		var req Request
		var args VaultForkArgs
		if json.Unmarshal(body, &req) == nil && json.Unmarshal(req.Args, &args) == nil && args.Target != "" && !ValidName(args.Target) {
			return Errorf(CodeInvalidArgument, "fork target %q: want 1-128 of [A-Za-z0-9_-], starting with a letter or digit", args.Target)
		}
	}
	return nil
}
