#!/usr/bin/env bash
# patroni.sh starts a throwaway etcd node and two Patroni-managed PostgreSQL
# nodes on loopback, kills the leader, and stops everything: PostgreSQL
# with automatic failover as users run it.
#
#   scripts/patroni.sh start DIR [async|sync|sync-strict]   # prints IDEM_PG_DSN=... (both nodes)
#   scripts/patroni.sh catchup DIR              # wait until the replica has what the leader wrote
#   scripts/patroni.sh kill DIR                 # SIGKILL the leader (Patroni and PostgreSQL)
#   scripts/patroni.sh wait DIR                 # wait until the other node leads
#   scripts/patroni.sh stop DIR
#
# start installs patroni, etcd-server and postgresql if absent (as root),
# starts one etcd member (client and peer ports from free_ports), then two
# Patroni nodes (as the postgres user when run as root), each with its REST
# API and PostgreSQL port, ttl 10 s, loop_wait 1 s, retry_timeout 3 s (a
# failover is noticed within ten seconds, instead of Patroni's default 30 s
# plus a loop of 10 s), maximum_lag_on_failover 1 MiB (Patroni's default),
# synchronous_mode (and synchronous_mode_strict) on with mode sync, off
# with async (Patroni's default). It waits until one node leads and the
# other streams from it (in sync mode: as the synchronous standby), and
# prints the DSN naming both nodes with target_session_attrs=read-write.
#
# kill SIGKILLs the leader's Patroni and its PostgreSQL process group, as
# in a machine crash; Patroni on the other node takes the leader key when it
# expires (ttl) and promotes its PostgreSQL. Every process is started in a
# process group of its own (setsid) and stopped by the PIDs in DIR/*.pid.
set -euo pipefail

log() { printf 'patroni.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_ports, apt_install

as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

find_bin() {
	local d
	for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -t/ -k5 -V -r); do
		[[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
	done
	return 1
}

# role N prints what node N's REST API says its role is (master, replica).
role() {
	local r
	r=$(curl -s --max-time 1 "http://127.0.0.1:$(sed -n 2p "$dir/node$1.ports")/patroni" 2>/dev/null) || return 1
	python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("role",""), d.get("state",""))' <<<"$r" 2>/dev/null
}

start() {
	local mode=${1:-async} sync bin ports i n user=postgres
	local strict=false
	case $mode in
	async) sync=false ;;
	sync) sync=true ;;
	sync-strict) sync=true strict=true ;;
	*) die "mode $mode: want async, sync or sync-strict" ;;
	esac
	if ! command -v patroni >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1 || ! bin=$(find_bin) || ! command -v curl >/dev/null 2>&1; then
		log "installing patroni, etcd-server, postgresql, curl (apt-get)"
		apt_install patroni etcd-server postgresql curl || die "apt-get install failed"
	fi
	bin=$(find_bin) || die "PostgreSQL not found"
	[[ $(id -u) -eq 0 ]] || user=$(id -un)
	mapfile -t ports < <(free_ports 6)
	echo "${ports[*]}" >"$dir/ports"
	[[ $(id -u) -eq 0 ]] && { chown postgres "$dir"; chmod 0755 "$dir"; }
	mkdir -p "$dir/etcd"
	setsid etcd --name e1 --data-dir "$dir/etcd" \
		--listen-client-urls "http://127.0.0.1:${ports[0]}" --advertise-client-urls "http://127.0.0.1:${ports[0]}" \
		--listen-peer-urls "http://127.0.0.1:${ports[1]}" --initial-advertise-peer-urls "http://127.0.0.1:${ports[1]}" \
		--initial-cluster "e1=http://127.0.0.1:${ports[1]}" >"$dir/etcd.log" 2>&1 </dev/null &
	echo $! >"$dir/etcd.pid"
	for i in $(seq 1 100); do
		curl -s --max-time 1 "http://127.0.0.1:${ports[0]}/health" | grep -q true && break
		[[ $i -eq 100 ]] && die "etcd did not become healthy"
		sleep 0.1
	done
	for n in 1 2; do
		local api=${ports[$((2 * n))]} pg=${ports[$((2 * n + 1))]}
		printf '%s\n%s\n' "$pg" "$api" >"$dir/node$n.ports"
		mkdir -p "$dir/node$n"
		chmod 0700 "$dir/node$n"
		[[ $(id -u) -eq 0 ]] && chown postgres "$dir/node$n"
		cat >"$dir/node$n.yml" <<EOF
scope: idem
name: node$n
restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api
etcd3:
  hosts: 127.0.0.1:${ports[0]}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync
    synchronous_mode_strict: $strict
    postgresql:
      use_pg_rewind: false
      parameters:
        fsync: "off"
        full_page_writes: "off"
        max_connections: 200
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - no-locale
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $dir/node$n/data
  bin_dir: $bin
  pgpass: $dir/node$n/pgpass
  authentication:
    superuser:
      username: $user
    replication:
      username: $user
  parameters:
    unix_socket_directories: $dir/node$n
EOF
		[[ $(id -u) -eq 0 ]] && chown postgres "$dir/node$n.yml"
		if [[ $(id -u) -eq 0 ]]; then
			setsid runuser -u postgres -- patroni "$dir/node$n.yml" >"$dir/node$n.log" 2>&1 </dev/null &
		else
			setsid patroni "$dir/node$n.yml" >"$dir/node$n.log" 2>&1 </dev/null &
		fi
		echo $! >"$dir/node$n.pid"
		# The first node bootstraps alone, then the second clones it.
		for i in $(seq 1 600); do
			local r
			r=$(role "$n" || true)
			[[ $n -eq 1 && $r == "master running"* ]] && break
			[[ $n -eq 2 && $r == "replica running"* ]] && break
			[[ $i -eq 600 ]] && { tail -n 20 "$dir/node$n.log" >&2; die "node $n did not start ($r)"; }
			sleep 0.1
		done
	done
	if [[ $sync == true ]]; then
		for i in $(seq 1 300); do
			[[ $("$bin/psql" -h 127.0.0.1 -p "$(sed -n 1p "$dir/node1.ports")" -U "$user" -d postgres -Atc \
				"SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'" 2>/dev/null) == 1 ]] && break
			[[ $i -eq 300 ]] && die "node 2 did not become the synchronous standby"
			sleep 0.1
		done
	fi
	"$bin/psql" -h 127.0.0.1 -p "$(sed -n 1p "$dir/node1.ports")" -U "$user" -d postgres -qc "CREATE DATABASE idem" >&2
	log "etcd on 127.0.0.1:${ports[0]}; Patroni nodes on 127.0.0.1:$(sed -n 1p "$dir/node1.ports") (leader) and :$(sed -n 1p "$dir/node2.ports"), $mode"
	printf 'IDEM_PG_DSN=postgres://%s@127.0.0.1:%s,127.0.0.1:%s/idem?sslmode=disable&target_session_attrs=read-write\n' \
		"$user" "$(sed -n 1p "$dir/node1.ports")" "$(sed -n 1p "$dir/node2.ports")"
}

# catchup waits until the replica has received every WAL record the leader
# had written when it was called (at most 30s).
catchup() {
	local n m lsn i bin user=postgres
	bin=$(find_bin) || die "PostgreSQL not found"
	[[ $(id -u) -eq 0 ]] || user=$(id -un)
	n=$(leader) || die "no leader"
	m=$((3 - n))
	lsn=$("$bin/psql" -h 127.0.0.1 -p "$(sed -n 1p "$dir/node$n.ports")" -U "$user" -d postgres -Atc "SELECT pg_current_wal_lsn()")
	for i in $(seq 1 3000); do
		[[ $("$bin/psql" -h 127.0.0.1 -p "$(sed -n 1p "$dir/node$m.ports")" -U "$user" -d postgres -Atc \
			"SELECT pg_last_wal_receive_lsn() >= '$lsn'::pg_lsn" 2>/dev/null) == t ]] && return 0
		sleep 0.01
	done
	die "the replica did not receive $lsn within 30s"
}

# leader prints the number of the node whose REST API says master.
leader() {
	local n
	for n in 1 2; do
		[[ -s "$dir/node$n.pid" ]] || continue
		[[ $(role "$n" || true) == master* ]] && { echo "$n"; return 0; }
	done
	return 1
}

kill_leader() {
	local n pid pg
	n=$(leader) || die "no leader"
	pid=$(cat "$dir/node$n.pid")
	kill -KILL -- "-$pid" 2>/dev/null || true
	# PostgreSQL runs in a session of its own (pg_ctl's setsid): its
	# postmaster PID is in its data directory.
	if [[ -s "$dir/node$n/data/postmaster.pid" ]]; then
		pg=$(head -n 1 "$dir/node$n/data/postmaster.pid")
		kill -KILL -- "-$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null || true
	fi
	rm -f "$dir/node$n.pid"
	echo "$n" >"$dir/killed"
	log "leader node $n killed"
}

wait_leader() {
	local i n
	for i in $(seq 1 600); do
		if n=$(leader) && [[ $(role "$n") == "master running"* ]]; then
			log "node $n leads"
			return 0
		fi
		sleep 0.1
	done
	die "no new leader within 60s"
}

stop() {
	local f pid n
	for n in 1 2; do
		if [[ -s "$dir/node$n.pid" ]]; then
			kill -KILL -- "-$(cat "$dir/node$n.pid")" 2>/dev/null || true
			rm -f "$dir/node$n.pid"
		fi
		if [[ -s "$dir/node$n/data/postmaster.pid" ]]; then
			pid=$(head -n 1 "$dir/node$n/data/postmaster.pid")
			kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	for f in "$dir"/etcd.pid; do
		[[ -s $f ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
}

[[ $# -ge 2 ]] || die "usage: $0 start DIR [async|sync|sync-strict] | catchup DIR | kill DIR | wait DIR | stop DIR"
verb=$1
dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $verb in
start) start "${3:-async}" ;;
catchup) catchup ;;
kill) kill_leader ;;
wait) wait_leader ;;
stop) stop ;;
*) die "usage: $0 start DIR [async|sync|sync-strict] | catchup DIR | kill DIR | wait DIR | stop DIR" ;;
esac
