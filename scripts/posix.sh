#!/usr/bin/env bash
# POSIX conformance of the mount: builds pjdfstest from its source tarball
# (never copied into the repository), mounts a fresh vault, runs the suite
# with prove from inside the mount as root, one syscall directory at a
# time, and prints the assertions passed per directory and in total. A
# test file that dies or hangs counts every assertion it planned and did
# not pass as failed.
#
#   scripts/posix.sh [SYSCALL...]     (needs bin/avfs: make build)
#
# Environment:
#   PJDFSTEST_TARBALL  the suite's source (default
#                      ../shared/pjdfstest/pjdfstest-85a8aea.tar.gz)
#   POSIX_DIR_TIMEOUT  seconds one syscall directory may take (default 1200)
#   POSIX_LOG          keep prove's verbose output in this file
#   AVFS_BIN           the avfs binary to test (default bin/avfs)
#   POSIX_MOUNT_FLAGS  more flags for `avfs mount` (say --queue-closes)
#   BENCH_TMP          where the vault store and mount point go
set -euo pipefail
export LC_ALL=C

cd "$(dirname "$0")/.."
root=$PWD
avfs=${AVFS_BIN:-$root/bin/avfs}
tarball=${PJDFSTEST_TARBALL:-$root/../shared/pjdfstest/pjdfstest-85a8aea.tar.gz}
dir_timeout=${POSIX_DIR_TIMEOUT:-1200}
mount_flags=${POSIX_MOUNT_FLAGS:-}

if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
	echo "posix: needs root and /dev/fuse (pjdfstest switches users; the mount uses allow_other)" >&2
	exit 1
fi
[ -x "$avfs" ] || { echo "posix: $avfs is missing: run 'make build'" >&2; exit 1; }
[ -f "$tarball" ] || { echo "posix: no pjdfstest tarball at $tarball (set PJDFSTEST_TARBALL)" >&2; exit 1; }
command -v prove >/dev/null || { echo "posix: prove (perl) not found" >&2; exit 1; }
if ! command -v autoreconf >/dev/null || ! command -v automake >/dev/null; then
	echo "posix: installing autoconf and automake" >&2
	apt-get install -y autoconf automake >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y autoconf automake >/dev/null; }
fi

# Build once per tarball content, in .bench (ignored by git).
sum=$(sha256sum "$tarball" | cut -c1-12)
src=$root/.bench/pjdfstest-$sum
if [ ! -x "$src/pjdfstest" ]; then
	rm -rf "$src"
	mkdir -p "$src"
	tar -xzf "$tarball" -C "$src"
	# git archive may wrap the tree in one directory.
	if [ ! -f "$src/configure.ac" ]; then
		inner=$(dirname "$(find "$src" -maxdepth 2 -name configure.ac | head -1)")
		mv "$inner"/* "$src"/
	fi
	(cd "$src" && autoreconf -ifs && ./configure && make pjdfstest) >"$src.build.log" 2>&1 ||
		{ echo "posix: building pjdfstest failed, see $src.build.log" >&2; exit 1; }
fi

tmp=${BENCH_TMP:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$tmp/avfs-posix.XXXXXX")
chmod 755 "$work"
home=$work/home
mnt=$work/mnt
mkdir -p "$mnt"
mount_pid=
cleanup() {
	local rc=$?
	set +e
	unmount_vault
	if grep -q " $mnt " /proc/mounts; then
		echo "posix: $mnt still mounted; leaving $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Other users reach the mount only with allow_other (older builds lack it).
allow=
"$avfs" mount --help 2>/dev/null | grep -q -- --allow-other && allow=--allow-other

# mount_vault NAME: a fresh vault NAME served at $mnt, one per syscall
# directory, so that a mount that dies costs only its own directory.
mount_vault() {
	"$avfs" --home "$home" vault create "$1" >/dev/null
	: >"$work/mount.out"
	# shellcheck disable=SC2086 # $allow and $mount_flags are lists of flags
	"$avfs" --home "$home" mount "$mnt" --vault "$1" $allow $mount_flags --json >"$work/mount.out" 2>"$work/mount.err" &
	mount_pid=$!
	for _ in $(seq 400); do
		[ -s "$work/mount.out" ] && mountpoint -q "$mnt" && return 0
		kill -0 "$mount_pid" 2>/dev/null || { echo "posix: avfs mount exited" >&2; cat "$work/mount.err" >&2; exit 1; }
		sleep 0.05
	done
	echo "posix: $mnt not mounted after 20 s" >&2
	exit 1
}

# unmount_vault: unmount $mnt (also a dead mount) and wait for its server.
unmount_vault() {
	if mountpoint -q "$mnt" || [ -n "$(grep " $mnt " /proc/mounts)" ]; then
		"$avfs" --home "$home" unmount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
	fi
	if [ -n "$mount_pid" ]; then
		for _ in $(seq 600); do kill -0 "$mount_pid" 2>/dev/null || break; sleep 0.05; done
		kill -0 "$mount_pid" 2>/dev/null && kill -TERM "$mount_pid"
		wait "$mount_pid" 2>/dev/null || true
		mount_pid=
	fi
}

if [ $# -gt 0 ]; then
	dirs=("$@")
else
	dirs=()
	for d in "$src"/tests/*/; do dirs+=("$(basename "$d")"); done
fi

log=${POSIX_LOG:-$work/prove.log}
: >"$log"
echo "# pjdfstest on an avfs mount"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
echo "suite:   $(basename "$tarball")"
printf '%-12s %8s %8s %7s\n' directory passed planned rate
tp=0
tt=0
t0=$SECONDS
for d in "${dirs[@]}"; do
	[ -d "$src/tests/$d" ] || { echo "posix: no test directory $d" >&2; exit 2; }
	mount_vault "posix-$d"
	run=$mnt/run
	mkdir -p "$run"
	out=$work/$d.tap
	rc=0
	(cd "$run" && timeout -k 10 "$dir_timeout" prove -rv "$src/tests/$d") >"$out" 2>&1 || rc=$?
	cat "$out" >>"$log"
	# Per test file: its plan, and the ok lines that are not "not ok".
	read -r p t < <(awk '
		/^\/.*\.t \.\./ { file++ }
		/^1\.\.[0-9]+/ { sub(/^1\.\./, ""); plan += $0 }
		/^ok [0-9]+/ { ok++ }
		END { print ok + 0, plan + 0 }' "$out")
	[ "$t" -ge "$p" ] || t=$p
	note=
	[ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (timed out after ${dir_timeout}s)"
	if ! stat "$mnt" >/dev/null 2>&1; then
		echo "posix: the mount died during $d" >&2
		note=" (mount died)"
	fi
	printf '%-12s %8d %8d %6.1f%%%s\n' "$d" "$p" "$t" "$(awk -v p="$p" -v t="$t" 'BEGIN { print t ? 100 * p / t : 0 }')" "$note"
	tp=$((tp + p))
	tt=$((tt + t))
	unmount_vault
done
printf '%-12s %8d %8d %6.1f%%\n' total "$tp" "$tt" "$(awk -v p="$tp" -v t="$tt" 'BEGIN { print t ? 100 * p / t : 0 }')"
echo "time:    $((SECONDS - t0)) s"
