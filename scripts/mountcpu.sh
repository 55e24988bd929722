#!/usr/bin/env bash
# The CPU an `avfs mount` process spends on each of mountbench's write
# workloads (cp -r of 2,000 files in, git init + add -A + commit, 500 new
# small files, rm -rf of the tree) and on a cold read of the tree (a new
# mount after a drop of the page cache), read from /proc/PID/stat (utime +
# stime, in clock ticks of 10 ms) before and after each: on a shared
# machine the wall time of a workload swings with the other processes'
# load, the serving process's CPU much less. Prints one line per
# workload; run it with two binaries in turns to compare them.
#
#   scripts/mountcpu.sh [AVFS_BINARY]   (default bin/avfs; needs root and /dev/fuse)
#
# Environment: MOUNTCPU_PERF=NAME also records each workload with
# `perf record -g -p PID` into perf.WORKLOAD.NAME in the current directory.
set -euo pipefail
export LC_ALL=C GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
avfs=$(realpath "${1:-$(dirname "$0")/../bin/avfs}")
perf_name=${MOUNTCPU_PERF:-}
out=$PWD
w=$(mktemp -d "${TMPDIR:-/tmp}/avfs-mountcpu.XXXXXX")
home=$w/home mnt=$w/mnt src=$w/src mp=
mkdir -p "$mnt" "$src"
cleanup() {
	if [ -n "$mp" ]; then
		"$avfs" --home "$home" unmount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
		wait "$mp" 2>/dev/null || true
	fi
	mountpoint -q "$mnt" 2>/dev/null || rm -rf "$w"
}
trap cleanup EXIT
# mountbench's tree: 2,000 source-like files in 100 directories.
# shellcheck source=scripts/mounttree.sh
. "$(dirname "$0")/mounttree.sh"
gen_tree "$src"
"$avfs" --home "$home" vault create v --json >/dev/null
mount_v() {
	"$avfs" --home "$home" mount "$mnt" --vault v --queue-closes --json >"$w/m.out" 2>"$w/m.err" &
	mp=$!
	for _ in $(seq 400); do
		[ -s "$w/m.out" ] && mountpoint -q "$mnt" && break
		sleep 0.05
	done
	mountpoint -q "$mnt" || { echo "mountcpu: not mounted" >&2; cat "$w/m.err" >&2; exit 1; }
}
# remount: a fresh mount process after a drop of the page cache, as
# mountbench's cold read has it.
remount() {
	"$avfs" --home "$home" unmount "$mnt" >/dev/null
	wait "$mp" 2>/dev/null || true
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "mountcpu: cannot drop the page cache: the cold read is warm" >&2
	mount_v
}
mount_v
cpu() { awk '{ print $14 + $15 }' "/proc/$mp/stat"; }
gitc='git -c user.email=a@b -c user.name=b -c gc.auto=0'
run() { # run NAME SCRIPT
	local c0 c1 t0 t1 pp=
	sync
	if [ -n "$perf_name" ]; then
		perf record -F 2000 -g -p "$mp" -o "$out/perf.$1.$perf_name" >/dev/null 2>&1 &
		pp=$!
		sleep 0.3
	fi
	c0=$(cpu) t0=${EPOCHREALTIME/./}
	(cd "$mnt" && bash -c "$2")
	t1=${EPOCHREALTIME/./}
	sleep 0.1 # the queue's last commit (20 ms)
	c1=$(cpu)
	[ -z "$pp" ] || { kill -INT "$pp"; wait "$pp" || true; }
	printf '%-9s wall %6d ms  mount cpu %5d ms\n' "$1" $(((t1 - t0) / 1000)) $(((c1 - c0) * 10))
}
run cp "cp -r '$src' tree"
run git "cd tree && git init -q && $gitc add -A && $gitc commit -q -m tree"
run write500 "mkdir w500 && for i in {1..500}; do printf 'small file %d\\n' \$i > w500/f\$i.txt; done"
remount
run cold "find tree -type f -print0 | xargs -0 cat >/dev/null"
run rm "rm -rf tree"
