#!/usr/bin/env bash
# How far avfs's mount is from what FUSE costs by itself. Runs the
# mountbench write workloads (cp -r of 2,000 files in, git init + add -A
# + commit, 500 new small files, rm -rf) in turns on four sides:
#   disk:   a plain directory on the host disk (mountbench's native side)
#   tmpfs:  a plain directory in /dev/shm (no disk at all)
#   floor:  go-fuse's loopback file system over a /dev/shm directory
#           (scripts/fusefloor.go: every request passed straight through to
#           tmpfs, the same kernel settings as avfs's mount). Nothing a
#           FUSE file system served by go-fuse does can cost less per
#           request; over tmpfs the storage costs next to nothing.
#   avfs:   `avfs mount --queue-closes` of a vault whose store is on the
#           host disk, as mountbench has it.
# Prints the median wall time of each workload and side, the requests the
# kernel sent to each FUSE side (counted on the first run), and the
# ratios avfs / floor and floor / tmpfs.
#
#   scripts/fusefloor.sh            (needs bin/avfs, root and /dev/fuse)
#
# Environment: FUSEFLOOR_REPS runs per workload and side (default 3);
# BENCH_TMP where the disk side and the vault store go (default $TMPDIR or /tmp).
set -euo pipefail
shopt -s inherit_errexit
export LC_ALL=C GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null

cd "$(dirname "$0")/.."
avfs=$PWD/bin/avfs
reps=${FUSEFLOOR_REPS:-3}
[ -x "$avfs" ] || { echo "$avfs is missing: run 'make build'" >&2; exit 1; }
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ] || [ ! -d /dev/shm ]; then
	echo "skipped: needs root, /dev/fuse and /dev/shm"
	exit 0
fi
work=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/avfs-fusefloor.XXXXXX")
shm=$(mktemp -d /dev/shm/avfs-fusefloor.XXXXXX)
floor_pid= avfs_pid= trace=
cleanup() {
	set +e
	for m in "$work/floor" "$work/avfs"; do mountpoint -q "$m" && umount "$m" 2>/dev/null; done
	[ -z "$floor_pid" ] || wait "$floor_pid"
	[ -z "$avfs_pid" ] || wait "$avfs_pid"
	[ -z "$trace" ] || { echo 0 >"$trace/events/fuse/fuse_request_send/enable"; rmdir "$trace"; } 2>/dev/null
	rm -rf "$work" "$shm"
}
trap cleanup EXIT

# shellcheck source=scripts/mounttree.sh
. scripts/mounttree.sh
gen_tree "$work/src"
go build -o "$work/fusefloor" scripts/fusefloor.go
mkdir -p "$work/disk" "$shm/tmpfs" "$shm/under" "$work/floor" "$work/avfs"

# The floor runs with the Ps avfs gives itself (mount.SpareProcs: three
# more than the CPUs), so the two servers differ only in what they do.
GOMAXPROCS=$(($(nproc) + 3)) "$work/fusefloor" "$work/floor" "$shm/under" >"$work/floor.out" 2>"$work/floor.err" &
floor_pid=$!
"$avfs" --home "$work/home" vault create v --json >/dev/null
"$avfs" --home "$work/home" mount "$work/avfs" --vault v --queue-closes --json >"$work/avfs.out" 2>"$work/avfs.err" &
avfs_pid=$!
for _ in $(seq 400); do
	[ -s "$work/floor.out" ] && [ -s "$work/avfs.out" ] && mountpoint -q "$work/floor" && mountpoint -q "$work/avfs" && break
	sleep 0.05
done
mountpoint -q "$work/floor" || { echo "fusefloor: the floor did not mount" >&2; cat "$work/floor.err" >&2; exit 1; }
mountpoint -q "$work/avfs" || { echo "fusefloor: avfs did not mount" >&2; cat "$work/avfs.err" >&2; exit 1; }

tr=/sys/kernel/tracing
if [ -d "$tr/events/fuse/fuse_request_send" ] && mkdir "$tr/instances/avfs-fusefloor-$$" 2>/dev/null; then
	trace=$tr/instances/avfs-fusefloor-$$
	echo 32768 >"$trace/buffer_size_kb"
fi

gitc='git -c user.email=a@b -c user.name=b -c gc.auto=0'
declare -A script=(
	[cp]="cp -r '$work/src' tree"
	[git]="cd tree && git init -q && $gitc add -A && $gitc commit -q -m tree"
	[write500]="mkdir w500 && for i in {1..500}; do printf 'small file %d\\n' \$i > w500/f\$i.txt; done"
	[rm]="rm -rf tree w500"
)
workloads=(cp git write500 rm)
declare -A dir=([disk]="$work/disk" [tmpfs]="$shm/tmpfs" [floor]="$work/floor" [avfs]="$work/avfs")
sides=(disk tmpfs floor avfs)
declare -A times=() reqs=()

# run SIDE WORKLOAD COUNT: time one workload, appending µs to times[SIDE.WORKLOAD];
# with COUNT=1 on a FUSE side, count the requests the kernel sends.
run() {
	local d=${dir[$1]} t0 t1 counting=0
	sync
	if [ "$3" = 1 ] && [ -n "$trace" ] && [[ $1 == floor || $1 == avfs ]]; then
		echo "connection == $(stat -c %d "$d")" >"$trace/events/fuse/fuse_request_send/filter"
		: >"$trace/trace"
		echo 1 >"$trace/events/fuse/fuse_request_send/enable"
		counting=1
	fi
	t0=${EPOCHREALTIME/./}
	(cd "$d" && bash -c "${script[$2]}") >/dev/null
	t1=${EPOCHREALTIME/./}
	if [ "$counting" = 1 ]; then
		echo 0 >"$trace/events/fuse/fuse_request_send/enable"
		reqs[$1.$2]=$(grep -c 'fuse_request_send' "$trace/trace" || true)
	fi
	times[$1.$2]+="$((t1 - t0)) "
}

for r in $(seq "$reps"); do
	# Rotate which side goes first: a disk slows under a run of writes.
	order=("${sides[@]:$(((r - 1) % 4))}" "${sides[@]:0:$(((r - 1) % 4))}")
	for w in "${workloads[@]}"; do
		for s in "${order[@]}"; do
			run "$s" "$w" "$([ "$r" = 1 ] && echo 1 || echo 0)"
		done
	done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.0f", u / 1000 }'; }
echo "# avfs's mount against FUSE by itself (go-fuse loopback over tmpfs), median of $reps"
echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(uname -r), wake_here $(cat /sys/module/fuse/parameters/wake_here 2>/dev/null || echo absent), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %8s %8s %8s %8s %12s %12s %10s %10s\n' workload "disk ms" "tmpfs ms" "floor ms" "avfs ms" "floor reqs" "avfs reqs" avfs/floor floor/tmpfs
for w in "${workloads[@]}"; do
	declare -A m=()
	for s in "${sides[@]}"; do m[$s]=$(echo "${times[$s.$w]}" | median); done
	printf '%-9s %8s %8s %8s %8s %12s %12s %10s %10s\n' "$w" "$(ms "${m[disk]}")" "$(ms "${m[tmpfs]}")" "$(ms "${m[floor]}")" "$(ms "${m[avfs]}")" \
		"${reqs[floor.$w]:--}" "${reqs[avfs.$w]:--}" \
		"$(awk -v a="${m[avfs]}" -v b="${m[floor]}" 'BEGIN { printf "%.2f", a / b }')" \
		"$(awk -v a="${m[floor]}" -v b="${m[tmpfs]}" 'BEGIN { printf "%.2f", a / b }')"
done
echo "  all runs (µs): $(for k in "${!times[@]}"; do printf '%s: %s| ' "$k" "${times[$k]}"; done)"
