#!/usr/bin/env bash
# The tools mount/tools_test.go runs in a mount and on ext4: git, make,
# tar (Debian packages), node and npm (Debian's nodejs and npm), and pnpm
# (from the npm registry; 10.x, as 11.x needs a newer node than Debian's
# 20). go and cargo come with the machine. Needs root; a developer without
# a tool sees its test skipped, CI (CI set) sees it fail.
set -euo pipefail
missing=()
command -v git >/dev/null || missing+=(git)
command -v make >/dev/null || missing+=(make)
command -v tar >/dev/null || missing+=(tar)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ "$(id -u)" != 0 ]; then
	command -v pnpm >/dev/null || missing+=(pnpm)
	[ ${#missing[@]} -eq 0 ] || echo "install ${missing[*]} to run the tool tests in a mount" >&2
	exit 0
fi
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v pnpm >/dev/null && command -v npm >/dev/null; then
	npm install --global --no-audit --no-fund --loglevel=error pnpm@10.34.9
fi
