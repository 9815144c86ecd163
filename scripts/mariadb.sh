#!/usr/bin/env bash
# mariadb.sh starts and stops a throwaway MariaDB server for the tests.
#
#   scripts/mariadb.sh start DIR   # prints one line: IDEM_MYSQL_DSN=user@tcp(127.0.0.1:PORT)/idem
#   scripts/mariadb.sh stop DIR
#
# start installs MariaDB when no mariadbd is found (apt-get update, then
# apt-get install mariadb-server, as root), creates a data directory in
# DIR/data with mariadb-install-db (as the mysql user when run as root:
# mariadbd refuses to run as root), starts the server on a free port of
# 127.0.0.1 (no socket outside DIR, no networking beyond loopback), waits
# until it accepts connections, creates the database "idem" and prints the
# DSN line, in go-sql-driver/mysql's form, on stdout. Everything else goes to
# stderr. The server's PID is written to DIR/mariadb.pid; stop sends it
# SIGTERM (a clean shutdown) and falls back to SIGKILL. A start on a DIR
# that holds a data directory reuses it; with MARIADB_PORT set it listens on
# that port (the stress harness restarts its own server so, after killing
# it).
#
# The server is fast and not crash-safe (innodb_flush_log_at_trx_commit=2,
# sync_binlog off, no binary log), which is right for tests. With
# IDEM_MYSQL_DURABLE=1 in the environment every commit is flushed
# (innodb_flush_log_at_trx_commit=1), as production runs it; make bench uses
# that. max_allowed_packet is 1 GiB, so that an outcome of idem.MaxOutcomeLen
# (64 MiB) fits in one statement.
set -euo pipefail

log() { printf 'mariadb.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# find_bin prints the path of mariadbd (or mysqld).
find_bin() {
	local b
	for b in "${MARIADB_BIN:-}" /usr/sbin/mariadbd /usr/sbin/mysqld "$(command -v mariadbd 2>/dev/null || true)"; do
		if [[ -n "$b" && -x "$b" ]]; then
			printf '%s\n' "$b"
			return 0
		fi
	done
	return 1
}

install_mariadb() {
	log "installing MariaDB (apt-get)"
	apt_install mariadb-server mariadb-client || die "apt-get install mariadb-server failed"
	# The package may start the system's own server: this script does not
	# use it, and leaves it as the package set it up.
}

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_port, bind_failed, apt_install

# client runs the command-line client against the server of DIR.
client() {
	local dir=$1
	shift
	mariadb --no-defaults -uroot --socket="$dir/mysqld.sock" "$@"
}

start() {
	local dir=$1 bin port user data
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	data="$dir/data"
	if ! bin=$(find_bin); then
		install_mariadb
		bin=$(find_bin) || die "mariadbd not found after installing mariadb-server"
	fi
	command -v mariadb >/dev/null 2>&1 || die "the mariadb client is not installed (package mariadb-client)"
	user=$(id -un)
	if [[ $(id -u) -eq 0 ]]; then
		id mysql >/dev/null 2>&1 || die "running as root but there is no mysql user to run the server as"
		user=mysql
		chown mysql "$dir"
		chmod 0755 "$dir"
		runuser -u mysql -- test -w "$dir" ||
			die "the mysql user cannot write to $dir (a parent directory is private?): use a directory under /tmp"
	fi
	# A temporary directory of the server's own: servers of several users
	# (and their mariadb-install-db) sharing /tmp have collided on its
	# files' names ("Error on delete of '/tmp/#sql-temptable-…'").
	mkdir -p "$dir/tmp"
	[[ $(id -u) -eq 0 ]] && chown mysql "$dir/tmp"
	if [[ ! -d "$data/mysql" ]]; then
		rm -rf "$data"
		mariadb-install-db --no-defaults --user="$user" --datadir="$data" --auth-root-authentication-method=normal \
			--skip-test-db --tmpdir="$dir/tmp" >"$dir/install.log" 2>&1 ||
			{ cat "$dir/install.log" >&2; die "mariadb-install-db failed"; }
	fi
	local flush=2 durability="fast, not crash-safe: innodb_flush_log_at_trx_commit=2"
	case "${IDEM_MYSQL_DURABLE:-0}" in
	1) flush=1 durability="durable: innodb_flush_log_at_trx_commit=1" ;;
	0 | "") ;;
	*) die "IDEM_MYSQL_DURABLE=$IDEM_MYSQL_DURABLE: want 1 (durable server) or 0 (fast test server)" ;;
	esac
	# A port another server took after free_port checked it: start again on
	# another one (lib.sh's bind_failed), up to 5 times; a MARIADB_PORT given
	# is used as it is.
	local attempt offset pid i ready
	for attempt in 1 2 3 4 5; do
		port=${MARIADB_PORT:-$(free_port)}
		local args=(--no-defaults --datadir="$data" --bind-address=127.0.0.1 --port="$port"
			--socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/mariadb.log" --tmpdir="$dir/tmp"
			--skip-name-resolve --innodb-flush-log-at-trx-commit="$flush" --innodb-buffer-pool-size=256M
			--innodb-log-file-size=1G --max-allowed-packet=1G --max-connections=300
			--character-set-server=utf8mb4 --skip-log-bin)
		[[ $(id -u) -eq 0 ]] && args+=(--user=mysql)
		offset=$(stat -c %s "$dir/mariadb.log" 2>/dev/null || echo 0)
		"$bin" "${args[@]}" >/dev/null 2>&1 &
		pid=$!
		echo "$pid" >"$dir/mariadb.pid"
		ready=0
		for i in $(seq 1 300); do
			if client "$dir" -e 'SELECT 1' >/dev/null 2>&1; then
				ready=1
				break
			fi
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		[[ $ready -eq 1 ]] && break
		tail -c +"$((offset + 1))" "$dir/mariadb.log" | tail -n 30 >&2 || true
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
			die "server did not become ready"
		fi
		wait "$pid" 2>/dev/null || true
		rm -f "$dir/mariadb.pid"
		bind_failed "$dir/mariadb.log" "$offset" && [[ -z ${MARIADB_PORT:-} && $attempt -lt 5 ]] || die "mariadbd exited"
		log "port $port was taken; starting again on another"
	done
	# The tests connect over TCP as root without a password: only this
	# loopback server, and only while it lives.
	client "$dir" -e "CREATE DATABASE IF NOT EXISTS idem;
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" >&2
	log "$("$bin" --version | head -n 1) on 127.0.0.1:$port, $durability, data in $data, pid $pid"
	printf 'IDEM_MYSQL_DSN=root@tcp(127.0.0.1:%s)/idem\n' "$port"
}

stop() {
	local dir=$1 pid
	[[ -d "$dir" ]] || { log "$dir: no such directory"; return 0; }
	dir=$(cd "$dir" && pwd)
	pid=""
	[[ -s "$dir/mariadb.pid" ]] && pid=$(cat "$dir/mariadb.pid")
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		local i
		for i in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "mariadbd $pid did not stop in 30s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$dir/mariadb.pid"
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
