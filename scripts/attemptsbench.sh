#!/usr/bin/env bash
# attemptsbench: 8 parallel attempts (fork + `go test` of a fixture module)
# through `avfs attempts run`, against the same 8 runs in 8 native
# directories, in one run (DESIGN.md §7: target ≤ 1.3×). Bounded: a few
# minutes on 2 cores; cleans up after itself.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
avfs="$root/bin/avfs"
[ -x "$avfs" ] || { echo "attemptsbench: build first (make build)"; exit 1; }
if [ ! -e /dev/fuse ] || [ "$(id -u)" != 0 ]; then echo "attemptsbench: skipped (needs root and /dev/fuse)"; exit 0; fi
n=8
work="$(mktemp -d "${BENCH_TMP:-/tmp}/avfs-attempts-XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local GOCACHE="$work/gocache"

# The fixture: a module with a few packages and tests.
src="$work/src"
mkdir -p "$src"
printf 'module example.com/fixture\n\ngo 1.21\n' > "$src/go.mod"
for p in alpha beta gamma delta; do
  mkdir -p "$src/$p"
  cat > "$src/$p/$p.go" <<GO
package $p

// Sum adds the numbers up to n.
func Sum(n int) int {
	s := 0
	for i := 1; i <= n; i++ {
		s += i
	}
	return s
}
GO
  cat > "$src/$p/${p}_test.go" <<GO
package $p

import "testing"

func TestSum(t *testing.T) {
	for n := 0; n < 2000; n++ {
		if Sum(n) != n*(n+1)/2 {
			t.Fatal(n)
		}
	}
}
GO
done
# Warm the build cache once so both sides do the same incremental work.
(cd "$src" && go test ./... >/dev/null)

now() { date +%s%N; }
# Native: 8 copies, 8 concurrent `go test` runs.
t0=$(now)
for i in $(seq 1 $n); do cp -r "$src" "$work/native-$i"; done
for i in $(seq 1 $n); do (cd "$work/native-$i" && go test -count=1 ./... >/dev/null) & done
wait
native=$(( ($(now) - t0) / 1000000 ))

# avfs: one vault, 8 forks, 8 concurrent execs through attempts run.
home="$work/home"
"$avfs" --home "$home" vault create base >/dev/null
"$avfs" --home "$home" import "$src" / --vault base >/dev/null 2>&1
# A sandboxed exec builds with its namespace's own Go build cache (under
# the home, not $GOCACHE): warm it once too, as a namespace that has run
# a build before has it, so both sides time the same incremental work.
AVFS_EXEC_KEEPER=false "$avfs" --home "$home" --vault base exec -- go test ./... >/dev/null
t0=$(now)
"$avfs" --home "$home" --json attempts run --from base --count $n --keep none --timeout 300s -- go test -count=1 ./... > "$work/attempts.json"
avfs_ms=$(( ($(now) - t0) / 1000000 ))
ok=$(grep -o '"exit_code":0' "$work/attempts.json" | wc -l)

echo "## 8 parallel attempts (fork + go test) vs 8 native directories"
printf '| side | wall ms |\n|---|---:|\n| native: cp -r + go test ×%d in parallel | %d |\n| avfs attempts run --count %d (forks + execs through mounts) | %d |\n' "$n" "$native" "$n" "$avfs_ms"
awk -v a="$avfs_ms" -v b="$native" 'BEGIN { printf "ratio avfs ÷ native: %.2f (target ≤ 1.3)\n", a / b }'
echo "attempts that exited 0: $ok of $n"
