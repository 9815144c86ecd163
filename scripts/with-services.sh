#!/usr/bin/env bash
# Usage: scripts/with-services.sh COMMAND [ARG...]
#
# Starts a throwaway PostgreSQL, a throwaway Redis, a throwaway Redis
# Cluster (3 masters, 1 replica each: scripts/redis-cluster.sh) and a
# throwaway MariaDB (scripts/mariadb.sh) on 127.0.0.1 (free ports, a
# temporary directory, installed with apt-get when absent), runs COMMAND with
# IDEM_PG_DSN, IDEM_REDIS_ADDR, IDEM_REDIS_CLUSTER_ADDRS (comma-separated
# host:port of every node) and IDEM_MYSQL_DSN (go-sql-driver/mysql form)
# exported, and stops every server by PID when COMMAND ends, whether it
# passed, failed or was interrupted. The cluster and MariaDB start in the
# background while PostgreSQL and Redis start.
# Exits with COMMAND's status.
#
# PostgreSQL is the fast, not crash-safe test server; with IDEM_PG_DURABLE=1
# it is durable (fsync, synchronous_commit, full_page_writes on; see pg.sh),
# as make bench runs it; IDEM_MYSQL_DURABLE=1 does the same for MariaDB.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/idemgen-services.XXXXXX")
chmod 755 "$dir" # the postgres user must reach its data directory

cluster_pid=
mariadb_pid=
cleanup() {
	if [ -n "$cluster_pid" ]; then # a start still in flight (interrupted)
		kill "$cluster_pid" 2>/dev/null || true
		wait "$cluster_pid" 2>/dev/null || true
	fi
	if [ -n "$mariadb_pid" ]; then
		kill "$mariadb_pid" 2>/dev/null || true
		wait "$mariadb_pid" 2>/dev/null || true
	fi
	"$here/mariadb.sh" stop "$dir/mariadb" >&2 || true
	"$here/redis-cluster.sh" stop "$dir/cluster" >&2 || true
	"$here/redis.sh" stop "$dir/redis" >&2 || true
	"$here/pg.sh" stop "$dir/pg" >&2 || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$dir/pg" "$dir/redis" "$dir/cluster" "$dir/mariadb"
# The cluster starts in the background while PostgreSQL and Redis start. Its
# node timeout is 15s, not the script's 2s: a 64 MiB record (the conformance
# suite's MaxSizes) keeps a master busy for seconds under -race, and the
# other nodes would fail it over (CLUSTERDOWN for the tests beside it). The
# stress harness's failover scenarios start clusters of their own with 2s.
REDIS_CLUSTER_NODE_TIMEOUT=15000 "$here/redis-cluster.sh" start "$dir/cluster" >"$dir/cluster.out" &
cluster_pid=$!
"$here/mariadb.sh" start "$dir/mariadb" >"$dir/mariadb.out" &
mariadb_pid=$!
pg_line=$("$here/pg.sh" start "$dir/pg")
redis_line=$("$here/redis.sh" start "$dir/redis")
wait "$cluster_pid" || { cluster_pid=; echo "with-services: scripts/redis-cluster.sh start failed" >&2; exit 1; }
cluster_pid=
cluster_line=$(cat "$dir/cluster.out")
wait "$mariadb_pid" || { mariadb_pid=; echo "with-services: scripts/mariadb.sh start failed" >&2; exit 1; }
mariadb_pid=
mariadb_line=$(cat "$dir/mariadb.out")
export "${pg_line?}" "${redis_line?}" "${cluster_line?}" "${mariadb_line?}"
echo "with-services: $pg_line $redis_line $cluster_line $mariadb_line" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
