#!/usr/bin/env bash
# The cost of idemvet (analysis/idemvet) under go vet, against plain go vet,
# on the same packages (default ./examples/...): both with every package
# already compiled (a go test -run '^$' first) and no vet result to reuse (a
# flag of each tool gets a value never used before, and go vet keys its
# cached results by the flags: plain vet -printf.funcs=<nonce>, idemvet
# -c=<nonce>). Both vet every dependency too, the standard library
# included, for facts. Prints wall and CPU (user+sys of the go command and
# its children) times and their ratios; RUNS (default 1) repeats the pair.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=("${@:-./examples/...}")
runs=${RUNS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/idemvet" ./cmd/idemvet
go test -count=1 -run '^$' "${pkgs[@]}" >/dev/null
TIMEFORMAT='%R %U %S'
for i in $(seq "$runs"); do
	nonce=$(( $(date +%s) % 100000 + i ))
	vet=$( { time go vet -printf.funcs="BenchNonce$nonce" "${pkgs[@]}" >/dev/null 2>&1; } 2>&1 )
	idemvet=$( { time go vet -vettool="$tmp/idemvet" -c="$nonce" "${pkgs[@]}" >/dev/null 2>&1; } 2>&1 )
	awk -v v="$vet" -v i="$idemvet" -v p="${pkgs[*]}" 'BEGIN {
		split(v, a, " "); split(i, b, " ")
		vc = a[2] + a[3]; ic = b[2] + b[3]
		printf "%s: go vet %.1fs wall %.1fs CPU; go vet -vettool=idemvet %.1fs wall %.1fs CPU; ratio %.2f wall, %.2f CPU\n",
			p, a[1], vc, b[1], ic, b[1] / a[1], ic / vc }'
done
