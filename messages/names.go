package messages

import (
	"encoding/json"
	"regexp"
)

// nameRE is the rule for namespace and vault names: 1-128 of
// [A-Za-z0-9_-], starting with a letter or digit. Such a name is always
// one subject token and one key token; the vault package applies the same
// rule to the vaults it creates.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// ValidName reports whether s can name a namespace or a vault.
func ValidName(s string) bool { return nameRE.MatchString(s) }

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
