#!/usr/bin/env bash
# Counts the exported identifiers of every package (internal/cmd/exported):
# of the working tree, or of a commit given as the first argument, e.g.
#   scripts/exported.sh 97f4294 > before.txt; scripts/exported.sh > after.txt
# Nested modules (every directory with a go.mod) are counted too.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/exported.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && go build -o "$tmp/exported" ./internal/cmd/exported)
dir=$repo
if [ $# -gt 0 ]; then
	dir=$tmp/tree
	mkdir "$dir"
	git -C "$repo" archive "$1" | tar -x -C "$dir"
fi
cd "$dir"
nested=$(find . -name go.mod -not -path ./go.mod -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort)
# shellcheck disable=SC2086 # one argument per nested module
"$tmp/exported" . $nested
