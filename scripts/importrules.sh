#!/usr/bin/env bash
# importrules: the layering rules of docs/decisions.md, checked with go list.
# Each line: a package and the packages of ours it may depend on (directly
# or not). A leaf lists none. Run by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
# An allowed entry "p/..." allows p and every package under it.
rules=(
  "vault:"
  "messages:"
  "policy:"
  "exec:"
  "config:"
  "telemetry:"
  # mount: the go-fuse nodes over vault, and its kernel-free tree package(s).
  "mount:vault,mount/tree"
  "mount/tree:vault"
  "owners:messages"
  "embedded:messages"
  "client:messages,telemetry,internal/transfer"
  "handler:messages,telemetry,vault,internal/textdiff"
  "runner:config,exec,internal/textdiff,messages,telemetry,vault,handler,mount/...,policy"
  # dispatcher routes: it knows the wire contract and the owners, never a
  # store, a handler or a worker.
  "dispatcher:messages,owners,telemetry"
  # node is the composition root of a serving process: it may import every
  # layer below the fleet (and no NATS package, below).
  "node:config,exec,internal/textdiff,messages,telemetry,vault,handler,mount/...,policy,runner"
)
# Packages that must link no NATS package (nats.go, nats-server, micro,
# jetstream): the exec pipeline runs the same with or without a fleet,
# and a node serves in-process without one.
nonats=(vault messages mount runner handler telemetry node)
fail=0
for rule in "${rules[@]}"; do
  pkg=${rule%%:*}
  [ -d "$pkg" ] || continue # a package another branch adds
  allowed=" ${rule#*:} "
  allowed=${allowed//,/ }
  for dep in $(go list -deps "./$pkg" | grep "^$mod/" | sed "s|^$mod/||"); do
    [ "$dep" = "$pkg" ] && continue
    ok=0
    for a in $allowed; do
      case "$a" in
        */...) [ "$dep" = "${a%/...}" ] || [ "${dep#"${a%...}"}" != "$dep" ] && ok=1 ;;
        *) [ "$dep" = "$a" ] && ok=1 ;;
      esac
    done
    [ $ok = 1 ] || { echo "importrules: $pkg must not depend on $dep"; fail=1; }
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
