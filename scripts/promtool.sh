#!/usr/bin/env bash
# promtool.sh runs promtool (Debian's prometheus package), installing the
# package first when promtool is not found (apt-get, as root), as pg.sh
# installs PostgreSQL. Arguments are promtool's:
#
#   scripts/promtool.sh test rules deploy/prometheus/idem-rules.test.yml
set -euo pipefail

die() { echo "promtool.sh: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # apt_install

if ! command -v promtool >/dev/null 2>&1; then
	echo "promtool.sh: installing promtool (apt-get install prometheus)" >&2
	apt_install prometheus || die "apt-get install prometheus failed"
fi
exec promtool "$@"
