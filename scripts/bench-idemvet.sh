#!/usr/bin/env bash
# The cost of idemvet (analysis/idemvet) under go vet, against plain go vet,
# on the same packages (default ./examples/...), from a build cache that has
# every package compiled (go test -run '^$') but no vet result: each run
# starts from its own copy of that cache, so neither finds the other's
# results, and neither compiles. Prints both wall times and their ratio;
# RUNS (default 1) repeats the pair.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=("${@:-./examples/...}")
runs=${RUNS:-1}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
go build -o "$tmp/idemvet" ./cmd/idemvet
GOCACHE="$tmp/base" go test -count=1 -run '^$' "${pkgs[@]}" >/dev/null
now() { date +%s.%N; }
for i in $(seq "$runs"); do
	cp -a "$tmp/base" "$tmp/vet"
	cp -a "$tmp/base" "$tmp/idemvet-cache"
	t0=$(now)
	GOCACHE="$tmp/vet" go vet "${pkgs[@]}" >/dev/null 2>&1 || true
	t1=$(now)
	GOCACHE="$tmp/idemvet-cache" go vet -vettool="$tmp/idemvet" "${pkgs[@]}" >/dev/null 2>&1 || true
	t2=$(now)
	awk -v a="$t0" -v b="$t1" -v c="$t2" -v p="${pkgs[*]}" 'BEGIN {
		v = b - a; i = c - b
		printf "%s: go vet %.2fs, go vet -vettool=idemvet %.2fs, ratio %.2f\n", p, v, i, i / v }'
	chmod -R u+w "$tmp/vet" "$tmp/idemvet-cache"
	rm -rf "$tmp/vet" "$tmp/idemvet-cache"
done
