#!/usr/bin/env bash
# promtool.sh runs promtool (Debian's prometheus package), installing the
# package first when promtool is not found (apt-get, as root), as pg.sh
# installs PostgreSQL. Arguments are promtool's:
#
#   scripts/promtool.sh test rules deploy/prometheus/idem-rules.test.yml
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1; then
	[[ $(id -u) -eq 0 ]] || { echo "promtool.sh: promtool is not installed and this is not root: install the prometheus package" >&2; exit 1; }
	echo "promtool.sh: installing promtool (apt-get install prometheus)" >&2
	export DEBIAN_FRONTEND=noninteractive
	for i in 1 2 3 4 5 6; do
		# another apt-get may hold the lock for a while
		if apt-get update >&2 && apt-get install -y --no-install-recommends prometheus >&2; then
			break
		fi
		[[ $i -lt 6 ]] || exit 1
		sleep 10
	done
fi
exec promtool "$@"
