#!/usr/bin/env bash
# pg.sh starts and stops a throwaway PostgreSQL server for the tests.
#
#   scripts/pg.sh start DIR   # prints one line: IDEM_PG_DSN=postgres://...
#   scripts/pg.sh stop DIR
#
# start installs PostgreSQL when no initdb is found (apt-get, as root), runs
# initdb into DIR/pgdata (as the postgres user when run as root: initdb
# refuses root), starts the server on a free port of 127.0.0.1 with its socket
# in DIR, waits until it accepts connections, creates the database "idem" and
# prints the DSN line on stdout. Everything else goes to stderr. The
# postmaster's PID is written to DIR/pg.pid; stop uses pg_ctl stop -m fast and
# falls back to killing that PID.
#
# The server is fast and not crash-safe (fsync, synchronous_commit and
# full_page_writes off), which is right for tests. With IDEM_PG_DURABLE=1 in
# the environment it is durable instead, as production runs it (all three
# on: every commit waits for its WAL flush); make bench uses that, so that
# its PostgreSQL figures include the cost of a commit reaching the disk.
set -euo pipefail

log() { printf 'pg.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# find_bin prints the directory holding initdb and pg_ctl, newest version first.
find_bin() {
	local d
	if [[ -n "${PG_BIN:-}" && -x "${PG_BIN}/initdb" ]]; then
		printf '%s\n' "$PG_BIN"
		return 0
	fi
	for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -t/ -k5 -V -r); do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return 0
	fi
	return 1
}

install_pg() {
	log "installing PostgreSQL (apt-get)"
	apt_install postgresql || die "apt-get install postgresql failed"
}

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_port, bind_failed, apt_install

# as_owner runs a command as the postgres user when we are root.
as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		if command -v runuser >/dev/null 2>&1; then
			runuser -u postgres -- "$@"
		else
			su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
		fi
	else
		"$@"
	fi
}

start() {
	local dir=$1 bin port user data
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	data="$dir/pgdata"
	if ! bin=$(find_bin); then
		install_pg
		bin=$(find_bin) || die "initdb not found after installing postgresql"
	fi
	log "using $bin"
	user=$(id -un)
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user to run the server as"
		user=postgres
		chown postgres "$dir"
		chmod 0755 "$dir"
		as_owner test -w "$dir" ||
			die "the postgres user cannot write to $dir (a parent directory is private?): use a directory under /tmp"
	fi
	if [[ ! -s "$data/PG_VERSION" ]]; then
		rm -rf "$data"
		as_owner "$bin/initdb" -D "$data" -U "$user" -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
	fi
	local common=" -c max_connections=200 -c shared_buffers=128MB" durability
	case "${IDEM_PG_DURABLE:-0}" in
	1) durability="durable: fsync, synchronous_commit and full_page_writes on"
		common+=" -c fsync=on -c synchronous_commit=on -c full_page_writes=on" ;;
	0 | "") durability="fast, not crash-safe: fsync, synchronous_commit and full_page_writes off"
		common+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off" ;;
	*) die "IDEM_PG_DURABLE=$IDEM_PG_DURABLE: want 1 (durable server) or 0 (fast test server)" ;;
	esac
	# pg_stat_statements, when installed (postgresql-contrib), lets the
	# benchmarks report server time per statement (internal/benchcmp).
	if [[ -e "$bin/../lib/pg_stat_statements.so" ]]; then
		common+=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
	fi
	# A port another server took after free_port checked it: start again on
	# another one (lib.sh's bind_failed), up to 5 times.
	local attempt offset opts
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		opts="-c listen_addresses=127.0.0.1 -p $port -k $dir$common"
		offset=$(stat -c %s "$dir/postgres.log" 2>/dev/null || echo 0)
		as_owner "$bin/pg_ctl" -D "$data" -l "$dir/postgres.log" -w -t 60 -o "$opts" start >&2 && break
		tail -c +"$((offset + 1))" "$dir/postgres.log" | tail -n 30 >&2 || true
		bind_failed "$dir/postgres.log" "$offset" && [[ $attempt -lt 5 ]] || die "pg_ctl start failed"
		log "port $port was taken; starting again on another"
	done
	head -n 1 "$data/postmaster.pid" >"$dir/pg.pid"
	local i
	for i in $(seq 1 100); do
		if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
			break
		fi
		[[ $i -eq 100 ]] && die "server did not become ready"
		sleep 0.1
	done
	if ! "$bin/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = 'idem'" | grep -q 1; then
		"$bin/createdb" -h 127.0.0.1 -p "$port" -U "$user" idem >&2
	fi
	log "PostgreSQL $(cat "$data/PG_VERSION") on 127.0.0.1:$port, $durability, data in $data, pid $(cat "$dir/pg.pid")"
	printf 'IDEM_PG_DSN=postgres://%s@127.0.0.1:%s/idem?sslmode=disable\n' "$user" "$port"
}

stop() {
	local dir=$1 bin data pid
	[[ -d "$dir" ]] || { log "$dir: no such directory"; return 0; }
	dir=$(cd "$dir" && pwd)
	data="$dir/pgdata"
	pid=""
	[[ -s "$dir/pg.pid" ]] && pid=$(cat "$dir/pg.pid")
	if bin=$(find_bin) && [[ -s "$data/postmaster.pid" ]]; then
		if as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 30 stop >&2; then
			rm -f "$dir/pg.pid"
			return 0
		fi
		log "pg_ctl stop failed; killing $pid"
	fi
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true
		local i
		for i in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$dir/pg.pid"
}

case "${1:-}" in
start | stop)
	[[ $# -eq 2 ]] || die "usage: $0 start|stop DIR"
	"$1" "$2"
	;;
*)
	die "usage: $0 start|stop DIR"
	;;
esac
