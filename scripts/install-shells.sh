#!/usr/bin/env bash
# The shells cli's terminal tests type into (TestShellsCompleteNames):
# bash's completion library, zsh and fish. Debian packages; needs root.
set -euo pipefail
missing=()
[ -f /usr/share/bash-completion/bash_completion ] || missing+=(bash-completion)
command -v zsh >/dev/null || missing+=(zsh)
command -v fish >/dev/null || missing+=(fish)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "install ${missing[*]} to run the completion tests in every shell" >&2
	exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
