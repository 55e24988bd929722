#!/usr/bin/env bash
# importrules: the layering rules of docs/decisions.md, checked with go list.
# Each line: a package and the packages of ours it may depend on (directly
# or not). A leaf lists none. Run by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
rules=(
  "vault:"
  "messages:"
  "policy:"
  "exec:"
  "config:"
  "mount/tree:vault"
  "mount:vault,mount/tree"
  "runner:config,exec,internal/textdiff,messages,telemetry,vault,handler,mount,mount/tree,policy"
)
# Packages that must link no NATS package (nats.go, nats-server, micro,
# jetstream): the exec pipeline runs the same with or without a fleet.
nonats=(runner handler telemetry)
fail=0
for rule in "${rules[@]}"; do
  pkg=${rule%%:*}
  allowed=" ${rule#*:} "
  allowed=${allowed//,/ }
  for dep in $(go list -deps "./$pkg" | grep "^$mod/" | sed "s|^$mod/||"); do
    [ "$dep" = "$pkg" ] && continue
    case "$allowed" in
      *" $dep "*) ;;
      *) echo "importrules: $pkg must not depend on $dep"; fail=1 ;;
    esac
  done
done
for pkg in "${nonats[@]}"; do
  if go list -deps "./$pkg" | grep -q '^github.com/nats-io/'; then
    echo "importrules: $pkg must not depend on a NATS package:"
    go list -deps "./$pkg" | grep '^github.com/nats-io/' | sed 's/^/  /'
    fail=1
  fi
done
exit $fail
