#!/usr/bin/env bash
# Mount workloads against native: the workload set of DESIGN.md §2 and
# issue #11's (500 new small files, a cold read of 2,000 x 4 KB in 40
# dirs), run in one go both in a plain directory on the host disk and
# through a fresh `avfs mount` of a vault, plus the `avfs exec -- true`
# overhead of DESIGN.md §7 (through the CLI: exec keeper, one-shot, with
# avfs serve; and in-process). Prints a table (median of MOUNTBENCH_REPS runs per workload
# and side), the ratios and their geometric mean, also against the fastest
# native run (native times on a busy disk grow from run to run; the
# mount's own figures are steadier). Nothing is written into
# the repository; everything lives in one temporary directory that is
# removed on exit, after every mount this script made is unmounted.
#
#   scripts/mountbench.sh            (needs bin/avfs: make build)
#
# Environment:
#   MOUNTBENCH_REPS    runs per workload and side (default 3; the median is shown;
#                      0 runs only the exec measurements)
#   MOUNTBENCH_EXEC_REPS  timed calls per way of running exec (default 7)
#   MOUNTBENCH_INPROC  1 (default) also runs runner's in-process exec benchmark
#   MOUNTBENCH_BUDGET  seconds after which no new run starts (default 300)
#   STEP_TIMEOUT       seconds before one timed step is killed (default 120)
#   MOUNTBENCH_MOUNT_FLAGS  flags for `avfs mount` (default --queue-closes, as
#                      exec's mounts; set it empty for a mount that commits
#                      each file before close returns)
#   MOUNTBENCH_STEPS   the warm workloads to run before the cold read, e.g.
#                      "step_cp step_flatcopy" for the cold reads only (they read
#                      what those two copy; default: all of them)
#   MOUNTBENCH_SEQ_MB  size of the sequential-read file in MiB (default 1024;
#                      0 skips the sequential read)
#   MOUNTBENCH_EXEC    0 skips the exec-of-true measure (default 1)
#   BENCH_TMP          where the temporary trees and the vault store go
#                      (default $TMPDIR or /tmp; native and mount share it)
#
# Needs root (avfs mounts with DirectMountStrict) and /dev/fuse; without
# them it prints why and exits 0, so `make bench` still completes. Drops
# the page cache between cold runs when /proc/sys/vm/drop_caches is
# writable and says so when it is not.
set -euo pipefail
shopt -s inherit_errexit
export LC_ALL=C

cd "$(dirname "$0")/.."
root=$PWD
avfs=$root/bin/avfs
reps=${MOUNTBENCH_REPS:-3}
budget=${MOUNTBENCH_BUDGET:-300}
step_timeout=${STEP_TIMEOUT:-120}
mount_flags=${MOUNTBENCH_MOUNT_FLAGS---queue-closes}
nfiles=2000
script_t0=${EPOCHREALTIME/./}

echo "# avfs mount workloads against native (DESIGN.md §2, §7)"
if [ ! -x "$avfs" ]; then
	echo "$avfs is missing: run 'make build'" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
	echo "skipped: needs root and /dev/fuse (avfs mount uses DirectMountStrict)"
	exit 0
fi
for tool in git go cp find xargs stat timeout mountpoint awk; do
	command -v "$tool" >/dev/null || { echo "mountbench: $tool not found" >&2; exit 1; }
done
have_cargo=1
command -v cargo >/dev/null || have_cargo=0
have_npm=1
command -v npm >/dev/null && command -v node >/dev/null || have_npm=0

tmp=${BENCH_TMP:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$tmp/avfs-mountbench.XXXXXX")
home=$work/home
mnt=$work/mnt
mount_pid=
mkdir -p "$mnt" "$work/native"

# ---- mounts ---------------------------------------------------------------

# mount_vault NAME: serve vault NAME at $mnt; returns once it is mounted.
mount_vault() {
	: >"$work/mount.out"
	# shellcheck disable=SC2086 # mount_flags is a list of flags
	"$avfs" --home "$home" mount "$mnt" --vault "$1" $mount_flags --json >"$work/mount.out" 2>"$work/mount.err" &
	mount_pid=$!
	local i
	for i in $(seq 400); do
		if [ -s "$work/mount.out" ] && mountpoint -q "$mnt"; then
			return 0
		fi
		if ! kill -0 "$mount_pid" 2>/dev/null; then
			echo "mountbench: avfs mount exited early" >&2
			cat "$work/mount.err" >&2
			mount_pid=
			exit 1
		fi
		sleep 0.05
	done
	echo "mountbench: $mnt not mounted after 20 s" >&2
	exit 1
}

# unmount_vault: unmount $mnt and wait for the serving process to exit
# (it commits what it buffered on the way out).
unmount_vault() {
	[ -n "$mount_pid" ] || return 0
	if mountpoint -q "$mnt"; then
		"$avfs" --home "$home" unmount "$mnt" >/dev/null 2>"$work/umount.err" ||
			umount -l "$mnt" 2>/dev/null || true
	fi
	local i
	for i in $(seq 1200); do
		kill -0 "$mount_pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$mount_pid" 2>/dev/null; then
		echo "mountbench: avfs mount (pid $mount_pid) still running 60 s after unmount; sending SIGTERM" >&2
		kill -TERM "$mount_pid" 2>/dev/null || true
	fi
	wait "$mount_pid" 2>/dev/null || true
	mount_pid=
}

cleanup() {
	local rc=$?
	set +e
	if [ -n "$mount_pid" ]; then
		unmount_vault
	fi
	[ -z "${trace_dir:-}" ] || { echo 0 >"$trace_dir/events/fuse/fuse_request_send/enable"; rmdir "$trace_dir"; } 2>/dev/null
	[ -z "${serve_pid:-}" ] || { kill -TERM "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; }
	"$avfs" --home "$home" keeper stop --json >/dev/null 2>&1
	if mountpoint -q "$mnt" 2>/dev/null; then
		umount -l "$mnt" 2>/dev/null
	fi
	if mountpoint -q "$mnt" 2>/dev/null; then
		echo "mountbench: $mnt is still mounted; leaving $work in place" >&2
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- FUSE request counts ---------------------------------------------------

# The kernel's fuse:fuse_request_send tracepoint (Linux 6.12+), in a
# tracing instance of our own, filtered on the mount's connection: every
# request the kernel sends to avfs during a timed step of run 1 is counted
# by opcode. Cheap (a filtered tracepoint, read back after the step), and
# nothing in avfs changes. MOUNTBENCH_COUNT=0 turns it off.
trace_dir=
if [ "${MOUNTBENCH_COUNT:-1}" = 1 ]; then
	tr=/sys/kernel/tracing
	[ -d "$tr/events" ] || mount -t tracefs nodev "$tr" 2>/dev/null || true
	if [ -d "$tr/events/fuse/fuse_request_send" ] && mkdir "$tr/instances/avfs-mountbench-$$" 2>/dev/null; then
		trace_dir=$tr/instances/avfs-mountbench-$$
		echo 32768 >"$trace_dir/buffer_size_kb" 2>/dev/null || true
	fi
fi
counting=0  # set while run 1 runs
REQS=       # the last timed step's count: "TOTAL OP:N OP:N ..." (top 6)
declare -A reqs=()
trace_start() {
	REQS=
	[ -n "$trace_dir" ] && [ "$counting" = 1 ] && mountpoint -q "$mnt" || return 0
	echo "connection == $(stat -c %d "$mnt")" >"$trace_dir/events/fuse/fuse_request_send/filter"
	: >"$trace_dir/trace"
	echo 1 >"$trace_dir/events/fuse/fuse_request_send/enable"
}
trace_stop() {
	[ -n "$trace_dir" ] && [ "$counting" = 1 ] || return 0
	[ "$(cat "$trace_dir/events/fuse/fuse_request_send/enable")" = 1 ] || return 0
	echo 0 >"$trace_dir/events/fuse/fuse_request_send/enable"
	local lost
	lost=$(awk '/^overrun:/ { s += $2 } END { print s + 0 }' "$trace_dir"/per_cpu/cpu*/stats)
	REQS=$(sed -n 's/.*opcode [0-9]* (FUSE_\([A-Z_0-9]*\)).*/\1/p' "$trace_dir/trace" | sort | uniq -c | sort -rn |
		awk -v lost="$lost" '{ t += $1; if (NR <= 6) top = top " " $2 ":" $1 } END { printf "%d%s%s", t, (lost > 0 ? "+" : ""), top }')
}

# ---- timing ---------------------------------------------------------------

# timed DIR SCRIPT: sync, then run SCRIPT with bash -c in DIR (bounded by
# STEP_TIMEOUT); sets T to the wall time in µs. Output goes to $work/out
# and $work/err, shown if the step fails.
T=0
timed() {
	local dir=$1 script=$2 t0 t1 rc=0
	sync
	case "$dir" in "$mnt"*) trace_start ;; *) REQS= ;; esac
	t0=${EPOCHREALTIME/./}
	(cd "$dir" && exec timeout -k 5 "$step_timeout" bash -c "$script") >"$work/out" 2>"$work/err" || rc=$?
	t1=${EPOCHREALTIME/./}
	trace_stop
	if [ "$rc" != 0 ]; then
		echo "mountbench: step failed (exit $rc) in $dir: $script" >&2
		tail -n 30 "$work/err" >&2
		exit 1
	fi
	T=$(( t1 - t0 ))
}

declare -A res=()
record() { # record SIDE WORKLOAD µs (and the step's request count, on the mount side of run 1)
	res[$1/$2]+="$3 "
	if [ "$1" = mount ] && [ -n "$REQS" ]; then reqs[$2]=$REQS; fi
}

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print ""}'; }

can_drop=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
	can_drop=1
fi
drop_caches() {
	sync
	if [ "$can_drop" = 1 ]; then
		echo 3 >/proc/sys/vm/drop_caches
	fi
}

# ---- fixtures -------------------------------------------------------------

# gen_tree: scripts/mounttree.sh.
# shellcheck source=scripts/mounttree.sh
. "$root/scripts/mounttree.sh"

# gen_flat DIR: 2,000 files of exactly 4 KB in 40 directories DIR/dNN,
# 50 files each (issue #11's second harness). Deterministic.
gen_flat() {
	awk -v root="$1" 'BEGIN {
		line = sprintf("%063d", 0)
		for (d = 0; d < 40; d++) {
			system(sprintf("mkdir -p %s/d%02d", root, d))
			for (i = 0; i < 50; i++) {
				f = sprintf("%s/d%02d/f%02d.txt", root, d, i)
				for (l = 0; l < 64; l++)
					printf "%s\n", line > f
				close(f)
			}
		}
	}'
}

# gen_gomod DIR: a module with 4 packages (a chain p0 <- p1 <- p2 <- p3),
# 3 files of 40 functions each, and cmd/app using all of them. Standard
# library only.
gen_gomod() {
	local d=$1 p f k
	mkdir -p "$d/cmd/app"
	printf 'module example.com/mountbench\n\ngo 1.22\n' >"$d/go.mod"
	for p in 0 1 2 3; do
		mkdir -p "$d/pkg/p$p"
		for f in 0 1 2; do
			{
				printf 'package p%d\n\nimport (\n\t"fmt"\n\t"sort"\n\t"strconv"\n\t"strings"\n)\n' "$p"
				printf '\ntype T%d struct {\n\tName string\n\tVals map[string]int\n}\n' "$f"
				printf '\nfunc (t *T%d) Keys() []string {\n\tks := make([]string, 0, len(t.Vals))\n\tfor k := range t.Vals {\n\t\tks = append(ks, k)\n\t}\n\tsort.Strings(ks)\n\treturn ks\n}\n' "$f"
				for k in $(seq 0 39); do
					printf '\n// F%d_%d formats a sorted, scaled copy of xs.\nfunc F%d_%d(xs []int) string {\n\tys := append([]int(nil), xs...)\n\tsort.Ints(ys)\n\tvar b strings.Builder\n\tfor i, y := range ys {\n\t\tif i > 0 {\n\t\t\tb.WriteByte(%s)\n\t\t}\n\t\tb.WriteString(strconv.Itoa(y*%d + %d))\n\t}\n\treturn fmt.Sprintf("p%d.%d.%d:%%s", b.String())\n}\n' \
						"$f" "$k" "$f" "$k" "','" "$(( k + 1 ))" "$p" "$p" "$f" "$k"
				done
			} >"$d/pkg/p$p/f$f.go"
		done
		{
			printf 'package p%d\n' "$p"
			[ "$p" = 0 ] || printf '\nimport "example.com/mountbench/pkg/p%d"\n' $(( p - 1 ))
			printf '\n// All calls every function of the package.\nfunc All(xs []int) []string {\n\tvar out []string\n'
			[ "$p" = 0 ] || printf '\tout = append(out, p%d.All(xs)...)\n' $(( p - 1 ))
			for f in 0 1 2; do
				for k in $(seq 0 39); do
					printf '\tout = append(out, F%d_%d(xs))\n' "$f" "$k"
				done
			done
			printf '\treturn out\n}\n'
		} >"$d/pkg/p$p/all.go"
	done
	cat >"$d/cmd/app/main.go" <<'EOF'
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"example.com/mountbench/pkg/p3"
)

func main() {
	out := p3.All([]int{3, 1, 2})
	b, err := json.Marshal(map[string]any{"n": len(out), "first": out[0]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(b))
}
EOF
}

# gen_crate DIR: a crate without dependencies: 4 modules of 30 functions
# and 10 unit tests each, plus an integration test.
gen_crate() {
	local d=$1 m k
	mkdir -p "$d/src" "$d/tests"
	printf '[package]\nname = "mountbench"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n' >"$d/Cargo.toml"
	{
		for m in 0 1 2 3; do printf 'pub mod m%d;\n' "$m"; done
		printf '\npub fn all(xs: &[u64]) -> u64 {\n\tm0::sum(xs) ^ m1::sum(xs) ^ m2::sum(xs) ^ m3::sum(xs)\n}\n'
	} >"$d/src/lib.rs"
	for m in 0 1 2 3; do
		{
			printf 'use std::collections::HashMap;\n\n'
			printf '#[derive(Debug, Clone, Default)]\npub struct Acc {\n\tpub seen: HashMap<String, u64>,\n}\n\n'
			printf 'impl Acc {\n\tpub fn add(&mut self, k: &str, v: u64) -> u64 {\n\t\tlet e = self.seen.entry(k.to_string()).or_insert(0);\n\t\t*e = e.wrapping_add(v);\n\t\t*e\n\t}\n}\n'
			for k in $(seq 0 29); do
				printf '\npub fn f%d(xs: &[u64]) -> u64 {\n\tlet mut acc = Acc::default();\n\txs.iter().map(|x| acc.add(&format!("k{}", x %% %d), x.wrapping_mul(%d) ^ %d)).fold(0u64, |a, b| a.wrapping_add(b))\n}\n' \
					"$k" "$(( k + 2 ))" "$(( k * 7 + 3 ))" "$m"
			done
			printf '\npub fn sum(xs: &[u64]) -> u64 {\n\t0'
			for k in $(seq 0 29); do printf ' ^ f%d(xs)' "$k"; done
			printf '\n}\n\n#[cfg(test)]\nmod tests {\n\tuse super::*;\n'
			for k in $(seq 0 9); do
				printf '\n\t#[test]\n\tfn t%d() {\n\t\tassert_eq!(f%d(&[]), 0);\n\t\tassert_eq!(f%d(&[1, 2, 3]), f%d(&[1, 2, 3]));\n\t}\n' "$k" "$k" "$k" "$k"
			done
			printf '}\n'
		} >"$d/src/m$m.rs"
	done
	printf 'use mountbench::all;\n\n#[test]\nfn all_is_stable() {\n\tassert_eq!(all(&[1, 2, 3]), all(&[1, 2, 3]));\n\tassert_eq!(all(&[]), 0);\n}\n' >"$d/tests/it.rs"
}

# gen_npm DIR: a Node project whose `npm test` runs node's own test
# runner (no registry): 10 test files, each loading 12 of the 40
# packages in node_modules (each a package.json, an index and 10
# modules that require each other), so module resolution walks the tree
# as a real project's does.
gen_npm() {
	local d=$1 p m t
	mkdir -p "$d/test"
	printf '{\n  "name": "mountbench",\n  "version": "1.0.0",\n  "private": true,\n  "scripts": { "test": "node --test test/" }\n}\n' >"$d/package.json"
	for p in $(seq 0 39); do
		mkdir -p "$d/node_modules/pkg$p/lib"
		printf '{ "name": "pkg%d", "version": "1.0.%d", "main": "index.js" }\n' "$p" "$p" >"$d/node_modules/pkg$p/package.json"
		{
			printf "'use strict';\n"
			for m in $(seq 0 9); do printf "const m%d = require('./lib/m%d');\n" "$m" "$m"; done
			printf 'module.exports = (x) => m0(x)'
			for m in $(seq 1 9); do printf ' + m%d(x)' "$m"; done
			printf ';\n'
		} >"$d/node_modules/pkg$p/index.js"
		for m in $(seq 0 9); do
			printf "'use strict';\nconst path = require('node:path');\nmodule.exports = (x) => (x * %d + path.basename(__filename).length) %% 1000;\n" "$(( m + p ))" >"$d/node_modules/pkg$p/lib/m$m.js"
		done
	done
	for t in $(seq 0 9); do
		{
			printf "'use strict';\nconst test = require('node:test');\nconst assert = require('node:assert');\n"
			for p in $(seq 0 11); do printf "const p%d = require('pkg%d');\n" "$p" "$(( (t * 4 + p) % 40 ))"; done
			for p in $(seq 0 11); do printf "test('p%d', () => { assert.strictEqual(p%d(3), p%d(3)); assert.ok(p%d(1) >= 0); });\n" "$p" "$p" "$p" "$p"; done
		} >"$d/test/t$t.test.js"
	done
}

# ---- environment ----------------------------------------------------------

host_goenv="GOCACHE=$(go env GOCACHE) GOFLAGS=$(go env GOFLAGS) GOPROXY=$(go env GOPROXY)" # for the in-process benchmark
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off GOWORK=off GOTELEMETRY=off
export GOCACHE=$work/gocache
export CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR
gitc='git -c user.email=a@b -c user.name=b -c gc.auto=0'

src=$work/src
gen_tree "$src" "$nfiles"
(cd "$src" && find . -type f | sort) >"$work/files.lst"
[ "$(wc -l <"$work/files.lst")" = "$nfiles" ] || { echo "mountbench: tree has $(wc -l <"$work/files.lst") files" >&2; exit 1; }
tree_bytes=$(du -sb "$src" | cut -f1)
gen_flat "$work/flat"
(cd "$work/flat" && find . -type f | sort) >"$work/flat.lst"
[ "$(wc -l <"$work/flat.lst")" = 2000 ] || { echo "mountbench: flat tree has $(wc -l <"$work/flat.lst") files" >&2; exit 1; }
gen_gomod "$work/gomod"
[ "$have_cargo" = 0 ] || gen_crate "$work/crate"
[ "$have_npm" = 0 ] || gen_npm "$work/npm"

# Warm the shared GOCACHE once (standard library and the toolchain), and
# run the crate's tests once, both outside either side.
mkdir -p "$work/warm"
cp -r "$work/gomod" "$work/warm/gomod"
[ "$reps" = 0 ] || (cd "$work/warm/gomod" && go build -buildvcs=false -o app ./cmd/app && ./app >/dev/null)
if [ "$have_cargo" = 1 ] && [ "$reps" != 0 ]; then
	cp -r "$work/crate" "$work/warm/crate"
	(cd "$work/warm/crate" && cargo test --offline -q >/dev/null 2>&1)
fi
if [ "$have_npm" = 1 ] && [ "$reps" != 0 ]; then
	cp -r "$work/npm" "$work/warm/npm"
	(cd "$work/warm/npm" && npm test --silent >/dev/null) || { echo "mountbench: npm test fails outside either side" >&2; exit 1; }
fi

# warm_tools: read the toolchains back into the page cache after a
# drop_caches, so the next timed build does not pay for loading them.
warm_tools() {
	local dirs=("$(go env GOROOT)/bin" "$(go env GOTOOLDIR)" "$GOCACHE")
	if [ "$have_cargo" = 1 ]; then
		local sys
		sys=$(rustc --print sysroot)
		dirs+=("$sys/lib" "$sys/bin" "$(dirname "$(command -v cargo)")")
	fi
	if [ "$have_npm" = 1 ]; then
		dirs+=("$(readlink -f "$(command -v node)")" "$(dirname "$(readlink -f "$(command -v npm)")")/..")
	fi
	find "${dirs[@]}" -type f -print0 2>/dev/null | xargs -0 cat >/dev/null 2>&1 || true
	git --version >/dev/null
	cat "$avfs" >/dev/null
}

"$avfs" --home "$home" vault create execv --json >/dev/null

echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
echo "cpu:     $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "kernel:  $(uname -sr)"
echo "tools:   $(go version | cut -d' ' -f3), $(git --version), $([ "$have_cargo" = 1 ] && cargo --version | cut -d' ' -f1-2 || echo 'no cargo'), $([ "$have_npm" = 1 ] && echo "node $(node --version), npm $(npm --version)" || echo 'no npm')"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
echo "work:    $work (native trees and the vault store share this file system):"
df -T "$work" | sed 's/^/         /'
echo "mount:   avfs mount ${mount_flags:-(no flags)} (MOUNTBENCH_MOUNT_FLAGS); mount.passthrough ${AVFS_MOUNT_PASSTHROUGH:-true (the default)} (AVFS_MOUNT_PASSTHROUGH)"
wake_param=/sys/module/fuse/parameters/wake_here
if [ -r "$wake_param" ]; then
	echo "         fuse wake_here $(cat "$wake_param") before the first mount; mount.wake_here ${AVFS_MOUNT_WAKE_HERE:-true (the default)} (AVFS_MOUNT_WAKE_HERE)"
else
	echo "         this kernel's fuse module has no wake_here parameter"
fi
echo "tree:    $nfiles files, $tree_bytes bytes, in 100 directories (plus 11 parents)"
if [ "$can_drop" = 1 ]; then
	echo "cold:    page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before each cold read, both sides;"
	echo "         the mount side is also unmounted and mounted again by a new avfs process"
else
	echo "cold:    /proc/sys/vm/drop_caches is NOT writable: the native cold read is warm (page cache kept);"
	echo "         the mount side is unmounted and mounted again, so only its SQLite file stays cached"
fi
echo "go:      GOCACHE=$GOCACHE shared by both sides, warmed once by building the module elsewhere;"
echo "         each timed build is a fresh copy at a new path, so the module's 5 packages compile and link"
echo "         every time (the directory is part of Go's action ID without -trimpath); std comes from the cache"
echo "cargo:   cargo test --offline in a fresh copy after cargo clean; target/ inside the crate (on the mount"
echo "         for the mount side), so build, incremental files and test binaries go through each side's disk"

# ---- workloads ------------------------------------------------------------

# One function per warm workload, each run for both sides back to back
# (see both), so that both see the same load from the rest of the machine.
step_cp() { # step_cp SIDE DIR
	local n
	mkdir -p "$2"
	timed "$2" "cp -r '$src' '$2/tree'"
	record "$1" cp "$T"
	n=$(find "$2/tree" -type f | wc -l)
	[ "$n" = "$nfiles" ] || { echo "mountbench: $1: $n files after cp -r, want $nfiles" >&2; exit 1; }
}
step_git() {
	timed "$2/tree" "git init -q && $gitc add -A && $gitc commit -q -m tree"
	record "$1" git "$T"
}
step_status() {
	# Warm up after the clock has moved past the commit, so that no index
	# entry is racily clean (mtime = index mtime) and re-hashed each time.
	sleep 1.1
	(cd "$2/tree" && git status >/dev/null)
	timed "$2/tree" "for i in 1 2 3 4 5; do git status >/dev/null; done"
	record "$1" status "$T"
	[ -z "$(cd "$2/tree" && git status --porcelain)" ] || { echo "mountbench: $1: git status not clean" >&2; exit 1; }
}
step_find() {
	timed "$2/tree" "for i in 1 2 3; do find . -type f -print0 | xargs -0 stat -c '%s %Y %i' >/dev/null; done"
	record "$1" find "$T"
}
step_go() {
	cp -r "$work/gomod" "$2/gomod"
	timed "$2/gomod" "go build -buildvcs=false -o app ./cmd/app"
	record "$1" go "$T"
	(cd "$2/gomod" && ./app | grep -q '"n":480') || { echo "mountbench: $1: go build produced a wrong app" >&2; exit 1; }
}
step_npm() {
	mkdir -p "$2"
	cp -r "$work/npm" "$2/npm"
	timed "$2/npm" "npm test --silent >/dev/null"
	record "$1" npm "$T"
}
step_cargo() {
	cp -r "$work/crate" "$2/crate"
	(cd "$2/crate" && cargo clean -q 2>/dev/null)
	timed "$2/crate" "cargo test --offline -q"
	record "$1" cargo "$T"
}

cold_read() { # cold_read SIDE DIR
	timed "$2/tree" "xargs -d '\n' cat <'$work/files.lst' >/dev/null"
	record "$1" cold "$T"
}

# The workloads of issue #11's second harness (not in the DESIGN.md §2
# set, so not in its geometric mean; reported beside it).
step_write500() { # 500 new small files in a new directory, by one process
	timed "$2" "mkdir w500 && for i in {1..500}; do printf 'small file %d\\n' \$i > w500/f\$i.txt; done"
	record "$1" write500 "$T"
	[ "$(find "$2/w500" -type f | wc -l)" = 500 ] || { echo "mountbench: $1: not 500 files written" >&2; exit 1; }
}
step_flatcopy() { # untimed: the 2,000 x 4 KB tree, read back cold below
	cp -r "$work/flat" "$2/flat"
}
cold_flat() { # cold_flat SIDE DIR
	timed "$2/flat" "xargs -d '\n' cat <'$work/flat.lst' >/dev/null"
	record "$1" cold4k "$T"
}

rm_tree() { # rm_tree SIDE DIR
	timed "$2" "rm -rf tree"
	record "$1" rm "$T"
	[ ! -e "$2/tree" ] || { echo "mountbench: $1: tree still there after rm -rf" >&2; exit 1; }
}

runs=0
for r in $(seq "$reps"); do
	elapsed=$(( (${EPOCHREALTIME/./} - script_t0) / 1000000 ))
	if [ "$r" -gt 1 ] && [ "$elapsed" -ge "$budget" ]; then
		echo "note:    stopping after $runs runs: ${elapsed}s used of MOUNTBENCH_BUDGET=${budget}s"
		break
	fi
	[ "$r" = 1 ] || warm_tools
	counting=0
	[ "$r" != 1 ] || counting=1
	"$avfs" --home "$home" vault create "mb$r" --json >/dev/null
	mount_vault "mb$r"
	nd=$work/native/r$r
	md=$mnt/r$r
	if (( r % 2 )); then order=(native mount); else order=(mount native); fi
	steps=(step_cp step_git step_status step_find step_go step_write500 step_flatcopy)
	[ "$have_cargo" = 0 ] || steps+=(step_cargo)
	[ "$have_npm" = 0 ] || steps+=(step_npm)
	# shellcheck disable=SC2206 # a list of step names
	[ -z "${MOUNTBENCH_STEPS:-}" ] || steps=($MOUNTBENCH_STEPS)
	for step in "${steps[@]}"; do
		for side in "${order[@]}"; do
			if [ "$side" = native ]; then "$step" native "$nd"; else "$step" mount "$md"; fi
		done
	done
	for side in "${order[@]}"; do
		if [ "$side" = native ]; then
			drop_caches
			cold_read native "$nd"
			drop_caches
			cold_flat native "$nd"
		else
			unmount_vault
			drop_caches
			mount_vault "mb$r"
			cold_read mount "$md"
			unmount_vault
			drop_caches
			mount_vault "mb$r"
			cold_flat mount "$md"
		fi
	done
	for side in "${order[@]}"; do
		if [ "$side" = native ]; then rm_tree native "$nd"; else rm_tree mount "$md"; fi
	done
	unmount_vault
	rm -rf "$nd"
	runs=$r
	echo "run $r:   done at $(( (${EPOCHREALTIME/./} - script_t0) / 1000000 ))s, load $(cut -d' ' -f1 /proc/loadavg)"
done

# ---- sequential read of one large file ------------------------------------

# One file of MOUNTBENCH_SEQ_MB MiB of random bytes, copied to both sides
# untimed, then read with cat after the page cache was dropped (the mount
# side after a remount, as the cold read). The mount side reads twice:
# the first read after the copy, then again after another remount (with
# mount.passthrough the first one fills the content cache).
seq_mb=${MOUNTBENCH_SEQ_MB:-1024}
if [ "$seq_mb" -gt 0 ]; then
	dd if=/dev/urandom of="$work/big" bs=1M count="$seq_mb" status=none
	mkdir -p "$work/native/seq"
	cp "$work/big" "$work/native/seq/big"
	"$avfs" --home "$home" vault create seqv --json >/dev/null
	mount_vault seqv
	cp "$work/big" "$mnt/big"
	unmount_vault
	drop_caches
	mount_vault seqv
	timed "$mnt" "cat big >/dev/null"
	record mount seqfirst "$T"
	# Then both sides in turn, so that both see the same disk (a file
	# just written may still be being flushed below the guest).
	for i in 1 2 3; do
		unmount_vault
		drop_caches
		timed "$work/native/seq" "cat big >/dev/null"
		record native seq "$T"
		drop_caches
		mount_vault seqv
		timed "$mnt" "cat big >/dev/null"
		record mount seq "$T"
	done
	unmount_vault
	rm -rf "$work/native/seq" "$work/big"
fi

# ---- exec overhead (DESIGN.md §7) ----------------------------------------

# Every `avfs exec` here is its own process. Three ways, interleaved:
#  keeper:  the default without a server: the first exec of the home starts
#           the exec keeper (decisions §25), which keeps vault execv
#           mounted and a sandbox init started; later calls hand it the
#           request (the warm-up call below starts it, untimed).
#  oneshot: AVFS_EXEC_KEEPER=false: the CLI opens the store, mounts the
#           vault, starts an init, runs, unmounts (the figure before §25).
#  serve:   `avfs serve` runs on the home; the CLI sends the request to it.
# Then in-process: runner's BenchmarkExecTrue against BenchmarkOSExecTrue.
exec_once() { # exec_once ENVVAR=VALUE...: one timed exec; sets T, checks it completed
	local t0 t1
	t0=${EPOCHREALTIME/./}
	env "$@" timeout -k 5 60 "$avfs" --home "$home" exec --vault execv --checkpoint never --json -- true >"$work/env.json"
	t1=${EPOCHREALTIME/./}
	T=$(( t1 - t0 ))
	grep -q '"status":"completed"' "$work/env.json" || { echo "mountbench: exec true did not complete:" >&2; cat "$work/env.json" >&2; exit 1; }
}
true_t=() ver_t=() exec_t=() one_t=() dur_ms=() pre_t=() pair_t=()
exec_reps=${MOUNTBENCH_EXEC_REPS:-7}
[ "${MOUNTBENCH_EXEC:-1}" != 0 ] || exec_reps=0
if [ "$exec_reps" != 0 ]; then
	warm_tools
	exec_once AVFS_EXEC_KEEPER=true
fi
for i in $(seq "$exec_reps"); do
	t0=${EPOCHREALTIME/./}
	/bin/true
	t1=${EPOCHREALTIME/./}
	true_t+=($(( t1 - t0 )))

	t0=${EPOCHREALTIME/./}
	"$avfs" --home "$home" version --json >/dev/null
	t1=${EPOCHREALTIME/./}
	ver_t+=($(( t1 - t0 )))

	t0=${EPOCHREALTIME/./}
	exec_once AVFS_EXEC_KEEPER=true
	exec_t+=("$T")
	pair_t+=($(( T - ver_t[${#ver_t[@]} - 1] - true_t[${#true_t[@]} - 1] )))
	dur_ms+=("$(sed -n 's/.*"duration_ms":\([0-9]*\).*/\1/p' "$work/env.json")")
	started=$(sed -n 's/.*"started_at":"\([^"]*\)".*/\1/p' "$work/env.json")
	pre_t+=($(( $(date -d "$started" +%s%6N) - t0 )))

	exec_once AVFS_EXEC_KEEPER=false
	one_t+=("$T")
done
"$avfs" --home "$home" keeper stop --json >/dev/null

serve_t=()
if [ "$exec_reps" != 0 ]; then
# With `avfs serve` on the home (it would have stopped a keeper itself).
serve_pid=
fi
"$avfs" --home "$home" serve --json >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for i in $(seq 400); do
	[ -s "$work/serve.out" ] && break
	kill -0 "$serve_pid" 2>/dev/null || break
	sleep 0.05
done
if [ -s "$work/serve.out" ]; then
	exec_once # the first request mounts the vault in the server
	for i in $(seq "$exec_reps"); do
		exec_once
		serve_t+=("$T")
	done
else
	echo "mountbench: avfs serve did not start; no serve figure" >&2
	cat "$work/serve.err" >&2
fi
kill -TERM "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true
serve_pid=

# In-process (DESIGN.md §7: ≤ 5 ms over a bare os/exec): the whole pipeline
# in an already-mounted vault, through the handler. MOUNTBENCH_INPROC=0
# skips it (it compiles runner's tests first).
inproc=
if [ "${MOUNTBENCH_INPROC:-1}" = 1 ] && [ "$exec_reps" != 0 ]; then
	# shellcheck disable=SC2086 # host_goenv is a list of assignments
	inproc=$(cd "$root" && env $host_goenv go test -run '^$' -bench '^(BenchmarkExecTrue|BenchmarkOSExecTrue)$' -benchtime 100x -count 1 ./runner/ 2>&1 |
		awk '/^Benchmark/ { sub(/-[0-9]+$/, "", $1); printf "%s %.2f\n", $1, $3 / 1e6 }') || true
fi

# ---- report ---------------------------------------------------------------

sec() { awk -v u="$1" 'BEGIN { printf "%.3f", u / 1e6 }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.1f", u / 1e3 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

names=(cp git status go cargo npm find cold rm write500 cold4k)
declare -A label=(
	[cp]="cp -r in ($nfiles files; not in the set)"
	[git]="git init + add -A + commit"
	[status]="git status, warm, 5x"
	[go]="go build (module compiles, std cached)"
	[cargo]="cargo test --offline after cargo clean"
	[npm]="npm test, 10 files, 40 packages (#11; not in the set)"
	[find]="find -type f | xargs stat, 3x"
	[cold]="cold read of $nfiles files (cat)"
	[rm]="rm -rf of the tree (with .git)"
	[write500]="write 500 new small files (#11; not in the set)"
	[cold4k]="cold read, 2,000 x 4 KB in 40 dirs (#11; not in the set)"
)
[ "$can_drop" = 1 ] || label[cold]="read of $nfiles files (cat; native side warm: no drop_caches)"

echo
echo "medians of $runs runs per workload and side (seconds, wall); the last column divides the"
echo "mount's median by the fastest native run: this VM's disk slows down under sustained writes"
echo "(native git 0.3 s in a first run, 1-2 s in later ones), which the native medians then carry"
echo
fmt='| %-44s | %9s | %9s | %14s | %16s |\n'
printf "$fmt" "workload" "native s" "mount s" "mount ÷ native" "÷ fastest native"
printf "$fmt" "---" "---:" "---:" "---:" "---:"
ratios=() all_ratios=() over=() fast_ratios=() fast_over=()
for w in "${names[@]}"; do
	[ -n "${res[native/$w]:-}" ] || { printf "$fmt" "${label[$w]}" "n/a" "n/a" "skipped" ""; continue; }
	# shellcheck disable=SC2086
	nm=$(median ${res[native/$w]})
	# shellcheck disable=SC2086
	nf=$(printf '%s\n' ${res[native/$w]} | sort -n | head -1)
	# shellcheck disable=SC2086
	mm=$(median ${res[mount/$w]})
	q=$(ratio "$mm" "$nm") qf=$(ratio "$mm" "$nf")
	printf "$fmt" "${label[$w]}" "$(sec "$nm")" "$(sec "$mm")" "$q" "$qf"
	all_ratios+=("$q")
	if [ "$w" = write500 ] || [ "$w" = cold4k ] || [ "$w" = npm ]; then
		if awk -v q="$q" 'BEGIN { exit !(q > 2.5) }'; then over+=("$w ${q}×"); fi
	elif [ "$w" != cp ]; then
		ratios+=("$q") fast_ratios+=("$qf")
		if awk -v q="$q" 'BEGIN { exit !(q > 2.5) }'; then over+=("$w ${q}×"); fi
		if awk -v q="$qf" 'BEGIN { exit !(q > 2.5) }'; then fast_over+=("$w ${qf}×"); fi
	fi
done
geo() { printf '%s\n' "$@" | awk 'NF { s += log($1); n++ } END { if (n) printf "%.2f", exp(s / n); else printf "n/a" }'; }
gm=$(geo "${ratios[@]}") gmf=$(geo "${fast_ratios[@]}")
printf "$fmt" "**geometric mean, ${#ratios[@]} workloads**" "" "" "**$gm**" "**$gmf**"
printf "$fmt" "geometric mean of every row (cp -r in, #11's rows)" "" "" "$(geo "${all_ratios[@]}")" ""
echo
verdict=pass
if [ "$gm" = n/a ]; then verdict=n/a; elif awk -v g="$gm" 'BEGIN { exit !(g > 1.5) }'; then verdict=miss; fi
echo "target (DESIGN.md §2): geometric mean ≤ 1.5× → $verdict ($gm×); no workload over 2.5× → $([ ${#over[@]} = 0 ] && echo pass || (IFS=,; echo "miss: ${over[*]}" | sed 's/,/, /g'))"
verdictf=pass
if [ "$gmf" = n/a ]; then verdictf=n/a; elif awk -v g="$gmf" 'BEGIN { exit !(g > 1.5) }'; then verdictf=miss; fi
echo "against the fastest native run: geometric mean ≤ 1.5× → $verdictf ($gmf×); no workload over 2.5× → $([ ${#fast_over[@]} = 0 ] && echo pass || (IFS=,; echo "miss: ${fast_over[*]}" | sed 's/,/, /g'))"

if [ ${#reqs[@]} -gt 0 ]; then
	echo
	echo "FUSE requests the kernel sent to the mount during each step of run 1 (fuse:fuse_request_send;"
	echo "'+' when the trace buffer overflowed: a lower bound), total and the most frequent:"
	for w in "${names[@]}"; do
		if [ -n "${reqs[$w]:-}" ]; then echo "  $w: ${reqs[$w]}"; fi
	done
elif [ "${MOUNTBENCH_COUNT:-1}" = 1 ] && [ "$reps" != 0 ]; then
	echo
	echo "FUSE requests: not counted (no fuse:fuse_request_send tracepoint here)"
fi

if [ -n "${res[native/seq]:-}" ]; then
	# shellcheck disable=SC2086
	sn=$(median ${res[native/seq]}) sf=$(median ${res[mount/seqfirst]}) sm=$(median ${res[mount/seq]})
	mibs() { awk -v u="$1" -v mb="$seq_mb" 'BEGIN { printf "%.0f", mb / (u / 1e6) }'; }
	echo
	echo "sequential read of a ${seq_mb} MiB file (cat, page cache dropped; medians of 3, in turns):"
	printf "$fmt" "read" "s" "MiB/s" "of native"
	printf "$fmt" "---" "---:" "---:" "---:"
	printf "$fmt" "native" "$(sec "$sn")" "$(mibs "$sn")" "100%"
	printf "$fmt" "mount, first read after the copy" "$(sec "$sf")" "$(mibs "$sf")" "$(awk -v a="$sn" -v b="$sf" 'BEGIN { printf "%.0f%%", 100 * a / b }')"
	printf "$fmt" "mount, after remounts (in turns with native)" "$(sec "$sm")" "$(mibs "$sm")" "$(awk -v a="$sn" -v b="$sm" 'BEGIN { printf "%.0f%%", 100 * a / b }')"
fi

if [ "$exec_reps" = 0 ]; then
	echo
	echo "exec of \`true\`: skipped (MOUNTBENCH_EXEC=0)"
	echo "raw (µs, in run order):"
	for w in "${names[@]}" seq seqfirst; do
		[ -n "${res[native/$w]:-}${res[mount/$w]:-}" ] || continue
		echo "  $w: native ${res[native/$w]:-}| mount ${res[mount/$w]:-}"
	done
	echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) at end; total $(( (${EPOCHREALTIME/./} - script_t0) / 1000000 ))s"
	exit 0
fi

echo
echo "exec of \`true\` (DESIGN.md §7), medians of $exec_reps, interleaved; every avfs call is a new process:"
fmt2='| %-66s | %9s |\n'
printf "$fmt2" "measure" "ms"
printf "$fmt2" "---" "---:"
bare=$(median "${true_t[@]}")
ver=$(median "${ver_t[@]}")
printf "$fmt2" "/bin/true from bash (wall)" "$(ms "$bare")"
printf "$fmt2" "avfs version (wall: CLI start alone)" "$(ms "$ver")"
printf "$fmt2" "avfs exec -- true, no server: exec keeper (wall)" "$(ms "$(median "${exec_t[@]}")")"
printf "$fmt2" "  of which: launch to command start (started_at)" "$(ms "$(median "${pre_t[@]}")")"
printf "$fmt2" "  envelope duration_ms (run of true in the mount; whole ms)" "$(median "${dur_ms[@]}")"
printf "$fmt2" "  over CLI start + /bin/true (target <= 15)" "**$(ms $(( $(median "${exec_t[@]}") - ver - bare )))**"
# The row above is a difference of medians of separate processes whose
# start-up alone varies by several ms under load; this one pairs each
# exec with the version and true calls made just before it.
printf "$fmt2" "  the same, paired: median of (exec - version - true) per round" "$(ms "$(median "${pair_t[@]}")")"
printf "$fmt2" "avfs exec -- true, no server, exec.keeper false: mounts per call" "$(ms "$(median "${one_t[@]}")")"
printf "$fmt2" "  over CLI start + /bin/true" "$(ms $(( $(median "${one_t[@]}") - ver - bare )))"
if [ ${#serve_t[@]} -gt 0 ]; then
	printf "$fmt2" "avfs exec -- true, avfs serve running (wall)" "$(ms "$(median "${serve_t[@]}")")"
	printf "$fmt2" "  over CLI start + /bin/true" "$(ms $(( $(median "${serve_t[@]}") - ver - bare )))"
fi
if [ -n "$inproc" ]; then
	ie=$(awk '$1 == "BenchmarkExecTrue" { print $2 }' <<<"$inproc")
	io=$(awk '$1 == "BenchmarkOSExecTrue" { print $2 }' <<<"$inproc")
	printf "$fmt2" "in-process: BenchmarkExecTrue (runner, 100x, mean)" "$ie"
	printf "$fmt2" "in-process: BenchmarkOSExecTrue (bare os/exec)" "$io"
	printf "$fmt2" "  in-process over bare (target <= 5)" "**$(awk -v a="$ie" -v b="$io" 'BEGIN { printf "%.2f", a - b }')**"
fi
echo
echo "raw (µs, in run order):"
for w in "${names[@]}"; do
	[ -n "${res[native/$w]:-}" ] || continue
	echo "  $w: native ${res[native/$w]}| mount ${res[mount/$w]}"
done
for w in seq seqfirst; do
	[ -n "${res[native/$w]:-}${res[mount/$w]:-}" ] || continue
	echo "  $w: native ${res[native/$w]:-}| mount ${res[mount/$w]:-}"
done
echo "  exec: true ${true_t[*]} | version ${ver_t[*]} | keeper ${exec_t[*]} | to start ${pre_t[*]} | duration_ms ${dur_ms[*]} | oneshot ${one_t[*]} | serve ${serve_t[*]:-}"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) at end; total $(( (${EPOCHREALTIME/./} - script_t0) / 1000000 ))s"
