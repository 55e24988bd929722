#!/usr/bin/env bash
# Benchmarks: the Go benchmarks of every package, then avfs against native
# tools on one 10,000-file / 200 MB tree on the same disk. `make bench` runs
# this after building bin/avfs. Figures go to stdout; nothing is written
# into the repository. BENCHMARKS.md says how to read them.
#
#   scripts/bench.sh [--go-only | --compare-only | --cli-only]
#
# --cli-only runs the comparison on the 10,000-file tree and skips the mount
# and parallel-attempt workloads.
#
# Environment:
#   BENCHTIME   go test -benchtime (default 1s)
#   BENCH_TMP   where the temporary trees go (default $TMPDIR or /tmp; use
#               the disk you care about)
#   REPS        repetitions of each timed comparison step (default 5; the
#               median is shown; 200 MB copies run min(REPS, 3) times)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
avfs=$root/bin/avfs
benchtime=${BENCHTIME:-1s}
reps=${REPS:-5}
big_reps=$(( reps < 3 ? reps : 3 ))
files=10000
size=20000

run_go=1
run_compare=1
run_workloads=1
case "${1:-}" in
"") ;;
--go-only) run_compare=0 ;;
--compare-only) run_go=0 ;;
--cli-only) run_go=0 run_workloads=0 ;;
*) echo "usage: $0 [--go-only | --compare-only | --cli-only]" >&2; exit 2 ;;
esac

echo "# avfs benchmarks"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
echo "cpu:     $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "kernel:  $(uname -sr)"
echo "go:      $(go version | cut -d' ' -f3-)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"

if [ "$run_go" = 1 ]; then
	echo
	echo "## Go benchmarks (go test -run '^\$' -bench . -benchtime $benchtime -count 1 ./...)"
	echo "# Fixtures (10,000 files / 200 MB, 100,000 files / 200 MB, 10,000 files / 2 GB)"
	echo "# are built once per run; expect a few minutes."
	go test -run '^$' -bench . -benchtime "$benchtime" -count 1 -timeout 30m ./... 2>&1 |
		{ grep -v -e '^?' -e 'no test files' -e '^PASS$' -e '^ok ' || true; }
fi

[ "$run_compare" = 1 ] || exit 0

if [ ! -x "$avfs" ]; then
	echo "$avfs is missing: run 'make build' (make bench does it)" >&2
	exit 1
fi
for tool in git cp; do
	command -v "$tool" >/dev/null || { echo "bench: $tool not found" >&2; exit 1; }
done

tmp=${BENCH_TMP:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$tmp/avfs-bench.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
gitc() { git -c user.name=bench -c user.email=bench@example.invalid -c gc.auto=0 "$@"; }

now_us() { echo $(( $(date +%s%N) / 1000 )); }
# timed CMD...: run CMD with stdout to $work/out (stderr to $work/err,
# shown if CMD fails), print the wall time in µs.
timed() {
	local t0 t1
	sync
	t0=$(now_us)
	if ! "$@" >"$work/out" 2>"$work/err"; then
		echo "bench: failed: $*" >&2
		cat "$work/err" >&2
		return 1
	fi
	t1=$(now_us)
	echo $(( t1 - t0 ))
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v u="$1" 'BEGIN { if (u >= 100000) printf "%.0f ms", u/1000; else if (u >= 1000) printf "%.1f ms", u/1000; else printf "%.2f ms", u/1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { r = a/b; if (r >= 0.1) printf "%.2f", r; else printf "%.1e", r }'; }

# change10 DIR VER: overwrite 10 files spread over the host tree.
change10() {
	local k
	for k in 0 1 2 3 4 5 6 7 8 9; do
		printf 'changed %s %s\n' "$2" "$k" >"$1/s${k}0/f37.dat"
	done
}
# avfs_change10 VER: the same change in vault base.
avfs_change10() {
	local k
	for k in 0 1 2 3 4 5 6 7 8 9; do
		"$avfs" --home "$home" --vault base write "/s${k}0/f37.dat" "changed $1 $k" >/dev/null
	done
}
git_save() { gitc -C "$work/wt0" add -A && gitc -C "$work/wt0" commit -q -m "$1"; }
git_restore() { gitc -C "$work/wt0" reset -q --hard; }

echo
echo "## avfs against native tools: $files files of $size bytes (pseudo-random, $(( files * size / 1000000 )) MB)"
echo "# in $work ($(df -h --output=source,fstype "$work" | tail -1 | tr -s ' ')); warm page cache; sync before each"
echo "# timed step; nobody fsyncs during one (avfs runs SQLite with synchronous=NORMAL in WAL mode)."

go run ./scripts/gentree.go "$work/host" "$files" "$size"
host_bytes=$(du -sb "$work/host" | cut -f1)

# Native: cp -r, git worktree add, and git add+commit / reset --hard as the
# counterparts of checkpoint save / restore.
cp_t=()
for i in $(seq "$big_reps"); do
	cp_t+=("$(timed cp -r "$work/host" "$work/cp$i")")
	rm -rf "$work/cp$i"
done
cp -r "$work/host" "$work/repo"
t0=$(now_us)
gitc -C "$work/repo" init -q
gitc -C "$work/repo" add -A
gitc -C "$work/repo" commit -q -m tree
git_setup=$(( $(now_us) - t0 ))
wt_t=()
for i in $(seq 0 $(( big_reps - 1 ))); do
	wt_t+=("$(timed gitc -C "$work/repo" worktree add -q --detach "$work/wt$i")")
	[ "$i" = 0 ] || { gitc -C "$work/repo" worktree remove --force "$work/wt$i"; }
done
gsave_t=()
grestore_t=()
for i in $(seq "$reps"); do
	change10 "$work/wt0" "a$i"
	gsave_t+=("$(timed git_save "s$i")")
	change10 "$work/wt0" "b$i"
	grestore_t+=("$(timed git_restore)")
done
rm -rf "$work/repo" "$work/wt0"

# avfs: import the same tree, then fork / save / restore through the CLI.
home=$work/home
"$avfs" --home "$home" vault create base --json >/dev/null
import_t=$(timed "$avfs" --home "$home" --vault base import "$work/host" --json)
# More imports (each into a new vault: content is deduplicated, so the
# rows are written again but no chunk is) and exports of the whole tree.
imp_t=("$import_t")
exp_t=()
for i in $(seq "$big_reps"); do
	[ "$i" = 1 ] || {
		"$avfs" --home "$home" vault create "imp$i" --json >/dev/null
		imp_t+=("$(timed "$avfs" --home "$home" --vault "imp$i" import "$work/host" --json)")
	}
	exp_t+=("$(timed "$avfs" --home "$home" --vault base export / "$work/exp$i" --json)")
	[ "$i" = 1 ] && { diff -r "$work/host" "$work/exp1" >/dev/null || { echo "bench: export differs from the host tree" >&2; exit 1; }; }
	rm -rf "$work/exp$i"
done
start_t=()
fork_wall=()
fork_inproc=()
for i in $(seq "$reps"); do
	start_t+=("$(timed "$avfs" --home "$home" version --json)")
	fork_wall+=("$(timed "$avfs" --home "$home" vault fork base "fork$i" --json)")
	d=$(sed -n 's/.*"duration_ms":\([0-9.eE+-]*\).*/\1/p' "$work/out")
	fork_inproc+=("$(awk -v d="$d" 'BEGIN { printf "%d", d * 1000 }')")
done
save_t=()
restore_t=()
for i in $(seq "$reps"); do
	avfs_change10 "a$i"
	save_t+=("$(timed "$avfs" --home "$home" --vault base checkpoint save "c$i" --json)")
	avfs_change10 "b$i"
	restore_t+=("$(timed "$avfs" --home "$home" --vault base checkpoint restore "c$i" --json)")
	grep -q '"modified":\[{' "$work/out" || { echo "bench: restore undid nothing?" >&2; cat "$work/out" >&2; exit 1; }
done
store_bytes=$(du -sb "$home" | cut -f1)

cp_m=$(median "${cp_t[@]}")
wt_m=$(median "${wt_t[@]}")
gsave_m=$(median "${gsave_t[@]}")
grestore_m=$(median "${grestore_t[@]}")
start_m=$(median "${start_t[@]}")
fw_m=$(median "${fork_wall[@]}")
fi_m=$(median "${fork_inproc[@]}")
save_m=$(median "${save_t[@]}")
restore_m=$(median "${restore_t[@]}")
imp_m=$(median "${imp_t[@]}")
exp_m=$(median "${exp_t[@]}")

echo
echo "host tree: $host_bytes bytes; avfs home after import, $reps forks, $(( reps * 2 )) checkpoint steps: $store_bytes bytes"
echo "git setup (init, add, commit; untimed in the table): $(ms "$git_setup")"
echo "medians of $reps runs (copies of the whole tree: $big_reps runs)"
echo
fmt='| %-48s | %10s | %-26s | %10s | %13s |\n'
printf "$fmt" "avfs operation" "avfs" "native counterpart" "native" "avfs ÷ native"
printf "$fmt" "---" "---:" "---" "---:" "---:"
row() { printf "$fmt" "$1" "$(ms "$2")" "$3" "$(ms "$4")" "$(ratio "$2" "$4")"; }
row "vault fork (in-process, JSON duration_ms)" "$fi_m" "cp -r" "$cp_m"
row "vault fork (in-process, JSON duration_ms)" "$fi_m" "git worktree add --detach" "$wt_m"
row "vault fork (CLI process, wall)" "$fw_m" "cp -r" "$cp_m"
row "vault fork (CLI process, wall)" "$fw_m" "git worktree add --detach" "$wt_m"
row "checkpoint save, 10 files changed (CLI, wall)" "$save_m" "git add -A && git commit" "$gsave_m"
row "checkpoint save, 10 files changed (CLI, wall)" "$save_m" "cp -r" "$cp_m"
row "checkpoint restore, 10 files changed (CLI, wall)" "$restore_m" "git reset --hard" "$grestore_m"
row "import of the host tree (CLI, wall)" "$imp_m" "cp -r" "$cp_m"
row "export of the whole vault (CLI, wall)" "$exp_m" "cp -r" "$cp_m"
printf "$fmt" "CLI start alone (avfs version, wall)" "$(ms "$start_m")" "" "" ""
printf "$fmt" "vault fork over CLI start (wall)" "$(ms $(( fw_m - start_m )))" "" "" ""
echo
echo "raw (µs): cp ${cp_t[*]} | worktree ${wt_t[*]} | git save ${gsave_t[*]} | git reset ${grestore_t[*]}"
echo "raw (µs): fork in-process ${fork_inproc[*]} | fork wall ${fork_wall[*]} | save ${save_t[*]} | restore ${restore_t[*]} | version ${start_t[*]}"
echo "raw (µs): import ${imp_t[*]} | export ${exp_t[*]}"

# grep, search and find over a text tree of TEXT_FILES files (default
# 100,000 of 1,000 bytes; one in 100 holds "needle"), against grep -r and
# find on the host copy.
text_files=${TEXT_FILES:-100000}
echo
echo "## grep, search, find: $text_files text files of 1000 bytes"
rm -rf "$work/host"
GENTREE_TEXT=1 go run ./scripts/gentree.go "$work/text" "$text_files" 1000
"$avfs" --home "$home" vault create text --json >/dev/null
timp=$(timed "$avfs" --home "$home" --vault text import "$work/text" --json)
tcp=$(timed cp -r "$work/text" "$work/textcp")
rm -rf "$work/textcp"
g_t=() gg_t=() s_t=() f_t=() ff_t=()
for i in $(seq "$big_reps"); do
	g_t+=("$(timed "$avfs" --home "$home" --vault text grep needle -l 100000 --json)")
	grep -q '"truncated":false' "$work/out" || { echo "bench: avfs grep stopped early" >&2; exit 1; }
	gg_t+=("$(timed grep -rn needle "$work/text")")
	s_t+=("$(timed "$avfs" --home "$home" --vault text search needle -n 100000 --json)")
	f_t+=("$(timed "$avfs" --home "$home" --vault text find --name 'f4*.dat' --json)")
	ff_t+=("$(timed find "$work/text" -name 'f4*.dat')")
done
printf "$fmt" "avfs operation" "avfs" "native counterpart" "native" "avfs ÷ native"
printf "$fmt" "---" "---:" "---" "---:" "---:"
row "import of the text tree (CLI, wall, 1 run)" "$timp" "cp -r (1 run)" "$tcp"
row "grep needle (CLI, wall)" "$(median "${g_t[@]}")" "grep -rn needle" "$(median "${gg_t[@]}")"
row "search needle (CLI, wall)" "$(median "${s_t[@]}")" "grep -rn needle" "$(median "${gg_t[@]}")"
row "find --name 'f4*.dat' (CLI, wall)" "$(median "${f_t[@]}")" "find -name 'f4*.dat'" "$(median "${ff_t[@]}")"
echo "raw (µs): grep ${g_t[*]} | grep -r ${gg_t[*]} | search ${s_t[*]} | find ${f_t[*]} | find(1) ${ff_t[*]}"

[ "$run_workloads" = 1 ] || exit 0

# Mount workloads against native (DESIGN.md §2, issue #11's: 500 new small
# files, a cold read of 2,000 x 4 KB in 40 dirs), FUSE requests per
# workload, and the exec overhead (§7: through the CLI with the exec keeper,
# one-shot and with avfs serve, and in-process): its own temporary
# directory, vaults and mounts, about 5 minutes.
echo
"$root/scripts/mountbench.sh"

# The mount's write workloads beside go-fuse's loopback over tmpfs, what
# FUSE costs by itself (decisions §48), about 30 seconds.
echo
"$root/scripts/fusefloor.sh"

# Parallel attempts (DESIGN.md §7): 8 forks running `go test` against 8
# native directories.
echo
"$root/scripts/attemptsbench.sh"
