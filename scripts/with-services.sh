#!/usr/bin/env bash
# Usage: scripts/with-services.sh COMMAND [ARG...]
#
# Starts a throwaway PostgreSQL and a throwaway Redis on 127.0.0.1 (free
# ports, a temporary directory, installed with apt-get when absent), runs
# COMMAND with IDEM_PG_DSN and IDEM_REDIS_ADDR exported, and stops both
# servers by PID when COMMAND ends, whether it passed, failed or was
# interrupted. Exits with COMMAND's status.
#
# PostgreSQL is the fast, not crash-safe test server; with IDEM_PG_DURABLE=1
# it is durable (fsync, synchronous_commit, full_page_writes on; see pg.sh),
# as make bench runs it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/idemgen-services.XXXXXX")
chmod 755 "$dir" # the postgres user must reach its data directory

cleanup() {
	"$here/redis.sh" stop "$dir/redis" >&2 || true
	"$here/pg.sh" stop "$dir/pg" >&2 || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$dir/pg" "$dir/redis"
pg_line=$("$here/pg.sh" start "$dir/pg")
redis_line=$("$here/redis.sh" start "$dir/redis")
export "${pg_line?}" "${redis_line?}"
echo "with-services: $pg_line $redis_line" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
