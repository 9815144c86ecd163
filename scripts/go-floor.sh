#!/usr/bin/env bash
# Checks that the `go` line of every module given (default: the root) is the
# floor its dependencies force, no higher: the highest `go` line among the
# modules of its build list. A lower line is refused by the go command
# itself; a higher one would turn away users that the dependencies accept.
# Prints the floor and the toolchain the tests run on (docs/decisions/
# go-version.md says what that does and does not prove).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for d in "${@:-.}"; do
	own=$(cd "$d" && go mod edit -json | sed -n 's/^\t"Go": "\(.*\)",*$/\1/p')
	deps=$(cd "$d" && go list -m -f '{{if and (not .Main) .GoVersion}}{{.GoVersion}} {{.Path}}@{{.Version}}{{end}}' all)
	floor=$(printf '%s\n' "$deps" | sort -V | tail -1)
	if [ -z "$floor" ]; then
		echo "$d: go $own (no dependency declares a go version)"
		continue
	fi
	fv=${floor%% *}
	if [ "$own" != "$fv" ] && [ "$(printf '%s\n%s\n' "$own" "$fv" | sort -V | tail -1)" = "$own" ]; then
		echo "$d: go $own is above the floor go $fv (set by ${floor#* }): lower it" >&2
		status=1
	else
		echo "$d: go $own = the floor (${floor#* } says go $fv)"
	fi
done
echo "toolchain: $(go env GOVERSION)"
exit $status
