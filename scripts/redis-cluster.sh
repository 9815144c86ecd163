#!/usr/bin/env bash
# redis-cluster.sh — a throwaway Redis Cluster for the tests.
#
#   scripts/redis-cluster.sh start DIR [MASTERS [REPLICAS]]
#       install redis-server if absent (as root), start MASTERS×(1+REPLICAS)
#       cluster-enabled redis-servers (default 3 masters, 1 replica each) on
#       free 127.0.0.1 ports whose cluster bus port (port+10000) is free too
#       (lib.sh's free_ports: below the ephemeral range; a node whose port
#       was taken before it bound it starts again on another),
#       without persistence, each in DIR/PORT (its nodes.conf, its log
#       DIR/PORT/redis.log, its PID in DIR/PORT/redis.pid); join them with
#       `redis-cli --cluster create` (or, for one master, CLUSTER
#       ADDSLOTSRANGE and CLUSTER REPLICATE), wait until every node reports
#       cluster_state:ok and print one line on stdout:
#       IDEM_REDIS_CLUSTER_ADDRS=127.0.0.1:P1,... (the masters first)
#   scripts/redis-cluster.sh stop DIR
#       kill every server started in DIR (by DIR/*/redis.pid)
#
# cluster-node-timeout is 2000 ms (REDIS_CLUSTER_NODE_TIMEOUT overrides it):
# a killed master is failed over in about 2–5 s, long enough that a loaded
# machine does not fail a live master over by mistake. A replica may always
# take over (cluster-replica-validity-factor 0), as a test of failover wants.
# On any failure of start, every server already started is stopped.
# Diagnostics go to stderr.
set -euo pipefail

die() { echo "redis-cluster.sh: $*" >&2; exit 1; }

usage() { die "usage: $0 start DIR [MASTERS [REPLICAS]] | stop DIR"; }

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
masters=${3:-3}
replicas=${4:-1}
timeout_ms=${REDIS_CLUSTER_NODE_TIMEOUT:-2000}

install_redis() {
	command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
	echo "redis-cluster.sh: installing redis-server" >&2
	apt_install redis-server || die "apt-get install redis-server failed"
	command -v redis-cli >/dev/null 2>&1 || die "redis-cli still not found after install"
}

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_ports, bind_failed, apt_install

cli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@"; }

stop() {
	local f pid pids=()
	for f in "$dir"/*/redis.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
		rm -f "$f"
	done
	[ ${#pids[@]} -gt 0 ] || return 0
	for _ in $(seq 1 50); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && return 0
		sleep 0.1
	done
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

start_node() {
	local port=$1 d=$dir/$1
	mkdir -p "$d"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$d" --daemonize no --cluster-enabled yes \
		--cluster-config-file "$d/nodes.conf" --cluster-node-timeout "$timeout_ms" \
		--cluster-replica-validity-factor 0 >"$d/redis.log" 2>&1 </dev/null &
	echo $! >"$d/redis.pid"
}

wait_ping() {
	local port=$1
	# The node must be alive first: on a port another server took, the
	# PING reaches that server, which may never answer it (hence timeout).
	for _ in $(seq 1 100); do
		kill -0 "$(cat "$dir/$port/redis.pid")" 2>/dev/null || return 1
		[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
	done
	return 1
}

# start_nodes starts a node on each port of the array ports, and starts a
# node whose port another server took since free_ports checked it again on
# a new port (ports is updated), up to 5 times.
start_nodes() {
	local i p attempt
	for p in "${ports[@]}"; do start_node "$p"; done
	for i in "${!ports[@]}"; do
		for attempt in 1 2 3 4 5; do
			p=${ports[$i]}
			wait_ping "$p" && break
			tail -n 5 "$dir/$p/redis.log" >&2 || true
			kill "$(cat "$dir/$p/redis.pid")" 2>/dev/null || true
			bind_failed "$dir/$p/redis.log" && [ $attempt -lt 5 ] || die "redis-server on port $p did not answer"
			rm -rf "${dir:?}/$p"
			p=$(free_ports 1 10000 "${ports[@]}")
			echo "redis-cluster.sh: port ${ports[$i]} was taken; starting that node on $p" >&2
			ports[i]=$p
			start_node "$p"
		done
	done
}

# cluster_ok PORT...: every node says cluster_state:ok and knows every node,
# and every replica is attached to its master.
cluster_ok() {
	local p n=$# nodes
	for p in "$@"; do
		cli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
		nodes=$(cli "$p" CLUSTER NODES 2>/dev/null) || return 1
		[ "$(grep -c . <<<"$nodes")" -eq "$n" ] || return 1
		[ "$(awk '$3 ~ /slave/' <<<"$nodes" | grep -c . || true)" -eq $((masters * replicas)) ] || return 1
	done
}

start() {
	[[ $masters =~ ^[1-9][0-9]*$ && $replicas =~ ^[0-9]+$ ]] || usage
	[ "$masters" -eq 1 ] || [ "$masters" -ge 3 ] || die "a cluster has 1 or at least 3 masters (redis-cli --cluster create needs 3), not $masters"
	install_redis
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	compgen -G "$dir/*/redis.pid" >/dev/null && die "servers started in $dir may still run; stop them first"
	started=0
	trap '[ "$started" = 1 ] || stop' EXIT
	local total=$((masters * (1 + replicas))) ports=() p
	mapfile -t ports < <(free_ports "$total" 10000)
	[ ${#ports[@]} -eq "$total" ] || die "could not find $total free ports"
	start_nodes
	local addrs=()
	for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
	if [ "$masters" -ge 3 ]; then
		# The first MASTERS addresses become the masters.
		cli "${ports[0]}" --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 ||
			{ cat "$dir/create.log" >&2; die "redis-cli --cluster create failed"; }
	else
		cli "${ports[0]}" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
		for p in "${ports[@]:1}"; do cli "$p" CLUSTER MEET 127.0.0.1 "${ports[0]}" >/dev/null; done
		local id
		id=$(cli "${ports[0]}" CLUSTER MYID)
		for p in "${ports[@]:1}"; do
			for _ in $(seq 1 100); do
				# redis-cli exits 0 on an error reply ("Unknown node" until MEET
				# has reached the node): only OK counts.
				[ "$(cli "$p" CLUSTER REPLICATE "$id" 2>/dev/null | tr -d "\r")" = OK ] && break
				sleep 0.1
			done
		done
	fi
	for _ in $(seq 1 300); do
		if cluster_ok "${ports[@]}"; then
			started=1
			local IFS=,
			echo "IDEM_REDIS_CLUSTER_ADDRS=${addrs[*]}"
			return 0
		fi
		sleep 0.1
	done
	for p in "${ports[@]}"; do cli "$p" CLUSTER INFO | head -n 1 >&2 || true; done
	die "the cluster did not reach cluster_state:ok within 30s"
}

case $cmd in
start) start ;;
stop) stop ;;
*) usage ;;
esac
