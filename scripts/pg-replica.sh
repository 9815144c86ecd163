#!/usr/bin/env bash
# pg-replica.sh starts a throwaway PostgreSQL primary with one streaming
# standby, fails it over by promotion, and stops both: the failover
# scenarios (internal/stress/failover.go, make failover) run on it.
#
#   scripts/pg-replica.sh start DIR [async|sync|remote_apply]
#   scripts/pg-replica.sh catchup DIR   # wait until the standby has what the primary wrote
#   scripts/pg-replica.sh lag DIR       # stop the standby's replication
#   scripts/pg-replica.sh kill DIR      # SIGKILL the primary
#   scripts/pg-replica.sh promote DIR   # the same if it lives, then promote the standby
#   scripts/pg-replica.sh stop DIR
#
# start runs initdb into DIR/primary/pgdata (as the postgres user when run as
# root), starts the primary on a free port of 127.0.0.1, creates the database
# "idem", clones it with pg_basebackup -R into DIR/standby/pgdata, starts the
# standby on another free port (application_name standby1), waits until it
# streams (and, in the synchronous modes, until the primary counts it as its
# synchronous standby), and prints three lines on stdout:
#
#   IDEM_PG_DSN=postgres://USER@127.0.0.1:P1,127.0.0.1:P2/idem?sslmode=disable&target_session_attrs=read-write
#   IDEM_PG_PRIMARY_DSN=postgres://USER@127.0.0.1:P1/idem?sslmode=disable
#   IDEM_PG_STANDBY_DSN=postgres://USER@127.0.0.1:P2/idem?sslmode=disable
#
# The first is what a client that follows the failover uses: pgx (libpq
# too) tries the hosts in order and keeps the first that accepts writes.
# The modes set the primary's replication:
#   async         no synchronous standby (PostgreSQL's and Patroni's
#                 default): a commit is acknowledged once it is on the
#                 primary's disk; a failover loses what the standby had not
#                 received.
#   sync          synchronous_standby_names=standby1, synchronous_commit=on:
#                 a commit is acknowledged once the standby has flushed it.
#   remote_apply  the same, and the standby has applied it (visible to reads
#                 on the standby).
#
# The standby streams through a TCP proxy (socat, DIR/proxy.pid). lag stops
# the proxy (SIGSTOP to its process group), so that nothing the primary
# commits from then on reaches the standby: the unreplicated window of an
# asynchronous standby that fell behind (bounded in Patroni by
# maximum_lag_on_failover). In the synchronous modes commits then wait.
# (Stopping a server process instead is unsafe: a walsender stopped while
# it holds a spinlock stalls every commit of the primary; and stopping the
# standby's walreceiver loses nothing: the kernel keeps what was sent in
# the socket's buffer.) kill SIGKILLs the primary and the proxy.
# promote SIGKILLs the primary's whole process group (pg_ctl starts the
# postmaster as a session leader: the postmaster and every backend die at
# once, as in a machine crash), promotes the standby (pg_ctl promote) and
# waits until it accepts writes. Every process is found by the PIDs this
# script wrote into DIR. stop SIGKILLs both servers' process groups (the
# data directories are thrown away).
#
# The servers are not crash-safe on their own disks (fsync and
# full_page_writes off: a process crash loses nothing the kernel has, which
# is all these scenarios do); synchronous_commit is as the mode says.
set -euo pipefail

log() { printf 'pg-replica.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_ports, bind_failed, apt_install

find_bin() {
	local d
	if [[ -n "${PG_BIN:-}" && -x "${PG_BIN}/initdb" ]]; then
		printf '%s\n' "$PG_BIN"
		return 0
	fi
	for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -t/ -k5 -V -r); do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/pg_basebackup" ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	return 1
}

as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# pg_start NAME PORT OPTS: starts the server of DIR/NAME on PORT; returns 2
# when the port was taken.
pg_start() {
	local name=$1 port=$2 opts=$3 offset
	offset=$(stat -c %s "$dir/$name/postgres.log" 2>/dev/null || echo 0)
	if as_owner "$bin/pg_ctl" -D "$dir/$name/pgdata" -l "$dir/$name/postgres.log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $dir/$name $opts" start >&2; then
		head -n 1 "$dir/$name/pgdata/postmaster.pid" >"$dir/$name.pid"
		return 0
	fi
	tail -c +"$((offset + 1))" "$dir/$name/postgres.log" | tail -n 20 >&2 || true
	bind_failed "$dir/$name/postgres.log" "$offset" && return 2
	return 1
}

psql_at() {
	local port=$1
	shift
	"$bin/psql" -h 127.0.0.1 -p "$port" -U "$user" -d postgres -Atq "$@"
}

start() {
	local mode=${1:-async} common sync p1 p2 rc attempt
	case $mode in
	async) sync="" ;;
	sync) sync="synchronous_commit = on" ;;
	remote_apply) sync="synchronous_commit = remote_apply" ;;
	*) die "mode $mode: want async, sync or remote_apply" ;;
	esac
	if ! bin=$(find_bin); then
		log "installing PostgreSQL (apt-get)"
		apt_install postgresql || die "apt-get install postgresql failed"
		bin=$(find_bin) || die "initdb not found after installing postgresql"
	fi
	if ! command -v socat >/dev/null 2>&1; then
		log "installing socat (apt-get)"
		apt_install socat || die "apt-get install socat failed"
	fi
	user=$(id -un)
	mkdir -p "$dir/primary" "$dir/standby"
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user to run the server as"
		user=postgres
		chown postgres "$dir" "$dir/primary" "$dir/standby"
		chmod 0755 "$dir"
		as_owner test -w "$dir" || die "the postgres user cannot write to $dir: use a directory under /tmp"
	fi
	echo "$mode" >"$dir/mode"
	common="-c fsync=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB -c wal_level=replica -c max_wal_senders=5 -c wal_keep_size=256MB"
	as_owner "$bin/initdb" -D "$dir/primary/pgdata" -U "$user" -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
	for attempt in 1 2 3 4 5; do
		p1=$(free_ports 1)
		rc=0
		pg_start primary "$p1" "$common" || rc=$?
		[[ $rc -eq 0 ]] && break
		[[ $rc -eq 2 && $attempt -lt 5 ]] || die "the primary did not start"
		log "port $p1 was taken; starting again on another"
	done
	echo "$p1" >"$dir/primary.port"
	"$bin/createdb" -h 127.0.0.1 -p "$p1" -U "$user" idem >&2
	as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$p1" -U "$user" -D "$dir/standby/pgdata" -R -X stream -c fast >&2 ||
		die "pg_basebackup failed"
	# The standby streams through a proxy (socat, in a process group of its
	# own: lag stops it) and names itself standby1, the name
	# synchronous_standby_names waits for (the last primary_conninfo of
	# postgresql.auto.conf wins).
	local px
	px=$(free_ports 1)
	setsid socat "TCP-LISTEN:$px,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$p1" >"$dir/proxy.log" 2>&1 </dev/null &
	echo $! >"$dir/proxy.pid"
	echo "$px" >"$dir/proxy.port"
	printf "primary_conninfo = 'host=127.0.0.1 port=%s user=%s application_name=standby1'\n" "$px" "$user" |
		as_owner tee -a "$dir/standby/pgdata/postgresql.auto.conf" >/dev/null
	for attempt in 1 2 3 4 5; do
		p2=$(free_ports 1)
		rc=0
		pg_start standby "$p2" "$common -c hot_standby=on" || rc=$?
		[[ $rc -eq 0 ]] && break
		[[ $rc -eq 2 && $attempt -lt 5 ]] || die "the standby did not start"
		log "port $p2 was taken; starting again on another"
	done
	echo "$p2" >"$dir/standby.port"
	local want="state = 'streaming'" i
	# The synchronous settings go in once the standby is there (a
	# synchronous primary would make createdb wait for it).
	if [[ -n $sync ]]; then
		want+=" AND sync_state = 'sync'"
		psql_at "$p1" -c "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" \
			-c "ALTER SYSTEM SET ${sync/ = / TO }" -c "SELECT pg_reload_conf()" >/dev/null
	fi
	for i in $(seq 1 300); do
		[[ $(psql_at "$p1" -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby1' AND $want") == 1 ]] && break
		[[ $i -eq 300 ]] && die "the standby did not stream within 30s"
		sleep 0.1
	done
	log "PostgreSQL $(cat "$dir/primary/pgdata/PG_VERSION") primary on 127.0.0.1:$p1 (pid $(cat "$dir/primary.pid")), standby on 127.0.0.1:$p2 (pid $(cat "$dir/standby.pid")), $mode"
	printf 'IDEM_PG_DSN=postgres://%s@127.0.0.1:%s,127.0.0.1:%s/idem?sslmode=disable&target_session_attrs=read-write\n' "$user" "$p1" "$p2"
	printf 'IDEM_PG_PRIMARY_DSN=postgres://%s@127.0.0.1:%s/idem?sslmode=disable\n' "$user" "$p1"
	printf 'IDEM_PG_STANDBY_DSN=postgres://%s@127.0.0.1:%s/idem?sslmode=disable\n' "$user" "$p2"
}

# catchup waits until the standby has received and flushed every WAL record
# the primary had written when it was called (at most 30s).
catchup() {
	local lsn i
	bin=$(find_bin) || die "psql not found"
	user=$(id -un)
	[[ $(id -u) -eq 0 ]] && user=postgres
	lsn=$(psql_at "$(cat "$dir/primary.port")" -c "SELECT pg_current_wal_lsn()")
	for i in $(seq 1 3000); do
		[[ $(psql_at "$(cat "$dir/standby.port")" -c "SELECT pg_last_wal_receive_lsn() >= '$lsn'::pg_lsn") == t ]] && return 0
		sleep 0.01
	done
	die "the standby did not receive $lsn within 30s"
}

# lag stops (SIGSTOP) the replication proxy's process group: what the
# primary sends from now on stays in the proxy's socket buffers and never
# reaches the standby.
lag() {
	[[ -s "$dir/proxy.pid" ]] || die "no replication proxy"
	kill -STOP -- "-$(cat "$dir/proxy.pid")"
	log "replication proxy $(cat "$dir/proxy.pid") stopped: nothing the primary commits from now on reaches the standby"
}

kill_primary() {
	local pid i
	[[ -s "$dir/primary.pid" ]] || return 0
	pid=$(cat "$dir/primary.pid")
	# pg_ctl made the postmaster a session (and process group) leader.
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || break
		[[ $i -eq 300 ]] && die "the primary $pid did not die"
		sleep 0.01
	done
	rm -f "$dir/primary.pid"
	stop_proxy
	log "primary $pid killed"
}

promote() {
	local i
	bin=$(find_bin) || die "pg_ctl not found"
	user=$(id -un)
	[[ $(id -u) -eq 0 ]] && user=postgres
	kill_primary
	as_owner "$bin/pg_ctl" -D "$dir/standby/pgdata" -w -t 60 promote >&2 || die "pg_ctl promote failed"
	for i in $(seq 1 300); do
		[[ $(psql_at "$(cat "$dir/standby.port")" -c "SELECT pg_is_in_recovery()" 2>/dev/null) == f ]] && break
		[[ $i -eq 300 ]] && die "the standby did not leave recovery within 30s"
		sleep 0.1
	done
	log "standby promoted on 127.0.0.1:$(cat "$dir/standby.port")"
}

stop_one() {
	local name=$1 pid=""
	[[ -s "$dir/$name.pid" ]] && pid=$(cat "$dir/$name.pid")
	[[ -n "$pid" ]] || return 0
	# SIGKILL to the process group: the data directories are thrown away.
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	rm -f "$dir/$name.pid"
}

# stop_proxy SIGKILLs the replication proxy's process group, stopped or not:
# what it held never reaches the standby.
stop_proxy() {
	[[ -s "$dir/proxy.pid" ]] || return 0
	kill -KILL -- "-$(cat "$dir/proxy.pid")" 2>/dev/null || kill -KILL "$(cat "$dir/proxy.pid")" 2>/dev/null || true
	rm -f "$dir/proxy.pid"
}

stop() {
	stop_proxy
	stop_one primary
	stop_one standby
}

[[ $# -ge 2 ]] || die "usage: $0 start DIR [async|sync|remote_apply] | catchup DIR | lag DIR | kill DIR | promote DIR | stop DIR"
verb=$1
dir=$2
[[ $verb == start ]] && mkdir -p "$dir"
[[ -d $dir ]] || die "$dir: no such directory"
dir=$(cd "$dir" && pwd)
case $verb in
start) start "${3:-async}" ;;
catchup) catchup ;;
lag) lag ;;
kill) kill_primary ;;
promote) promote ;;
stop) stop ;;
*) die "usage: $0 start DIR [async|sync|remote_apply] | catchup DIR | lag DIR | kill DIR | promote DIR | stop DIR" ;;
esac
