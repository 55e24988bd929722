#!/usr/bin/env bash
# fuzz.sh FUZZTIME TARGET PKG: fuzz one target for FUZZTIME. Go's fuzzer
# can fail with "context deadline exceeded" when -fuzztime ends while a
# worker is busy (no input failed, nothing is written to testdata); such a
# run is tried once more. Any other failure, a crasher above all, fails.
set -uo pipefail
run() { "${GO:-go}" test -run '^$' -fuzztime "$1" -fuzzminimizetime 0 -parallel 1 -fuzz "^$2\$" "$3" 2>&1 | tee "$log"; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run "$@" && exit 0
if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
	echo "fuzz.sh: $2 ended on Go's fuzzing deadline error, not on an input: once more"
	run "$@" && exit 0
fi
exit 1
