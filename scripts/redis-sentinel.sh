#!/usr/bin/env bash
# redis-sentinel.sh starts a throwaway Redis master, one replica and three
# Sentinels watching them, kills the master, and stops everything: the
# failover scenarios (internal/stress/failover.go, make failover) run on it.
#
#   scripts/redis-sentinel.sh start DIR   # prints the lines below
#   scripts/redis-sentinel.sh kill DIR    # SIGKILL the current master
#   scripts/redis-sentinel.sh wait DIR    # wait until the Sentinels name a live master
#   scripts/redis-sentinel.sh stop DIR
#
# start installs redis-server and redis-sentinel if absent (as root), starts
# the master and the replica (replicaof the master) on free ports of
# 127.0.0.1 without persistence, waits until the replica is in sync, starts
# three Sentinels (quorum 2, down-after-milliseconds 1000, failover-timeout
# 5000) monitoring the master under the name "idem", waits until each knows
# the replica and the other two, and prints on stdout:
#
#   IDEM_REDIS_SENTINEL_MASTER=idem
#   IDEM_REDIS_SENTINEL_ADDRS=127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3
#   IDEM_REDIS_ADDR=127.0.0.1:M   (the master at start)
#
# A client that follows the failover asks the Sentinels for the master
# (go-redis: redis.NewFailoverClient). Redis replicates asynchronously: the
# master acknowledges a write before the replica has it, so a failover may
# lose what the replica had not received.
#
# kill asks a Sentinel which server is the master and SIGKILLs it (by the
# PID this script wrote for that port); the Sentinels then promote the
# replica. wait returns once the Sentinels name a master that answers PING
# and says it is a master. Every process is stopped by its PID, written in
# DIR/*.pid.
set -euo pipefail

die() { echo "redis-sentinel.sh: $*" >&2; exit 1; }
log() { echo "redis-sentinel.sh: $*" >&2; }

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_ports, apt_install

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

# spawn NAME ARGS...: runs a server in the background, its PID in DIR/NAME.pid.
spawn() {
	local name=$1
	shift
	"$@" >"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

start() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-sentinel >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		log "installing redis-server, redis-sentinel, redis-tools"
		apt_install redis-server redis-sentinel redis-tools || die "apt-get install failed"
	fi
	local ports m r i s n
	mapfile -t ports < <(free_ports 5)
	m=${ports[0]} r=${ports[1]}
	for n in master:$m replica:$r; do
		local name=${n%%:*} port=${n#*:}
		mkdir -p "$dir/$name"
		local args=(redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/$name" --daemonize no --protected-mode no)
		[[ $name == replica ]] && args+=(--replicaof 127.0.0.1 "$m")
		spawn "$port" "${args[@]}"
	done
	for i in $(seq 1 100); do
		[[ $(cli "$r" info replication 2>/dev/null | tr -d '\r' | grep -c '^master_link_status:up') == 1 ]] && break
		[[ $i -eq 100 ]] && die "the replica did not sync with the master within 10s"
		sleep 0.1
	done
	local addrs=()
	for s in "${ports[@]:2}"; do
		cat >"$dir/sentinel-$s.conf" <<EOF
port $s
bind 127.0.0.1
protected-mode no
daemonize no
dir $dir
sentinel monitor idem 127.0.0.1 $m 2
sentinel down-after-milliseconds idem 1000
sentinel failover-timeout idem 5000
sentinel parallel-syncs idem 1
EOF
		spawn "$s" redis-sentinel "$dir/sentinel-$s.conf"
		addrs+=("127.0.0.1:$s")
	done
	for s in "${ports[@]:2}"; do
		for i in $(seq 1 300); do
			local st
			st=$(cli "$s" sentinel master idem 2>/dev/null | tr -d '\r' | paste - - | awk -F'\t' '$1=="num-slaves"||$1=="num-other-sentinels"{printf "%s=%s ", $1, $2}' || true)
			[[ $st == *"num-slaves=1"* && $st == *"num-other-sentinels=2"* ]] && break
			[[ $i -eq 300 ]] && die "sentinel $s did not find the replica and the other sentinels within 30s ($st)"
			sleep 0.1
		done
	done
	echo "${ports[*]}" >"$dir/ports"
	log "master 127.0.0.1:$m, replica 127.0.0.1:$r, sentinels ${addrs[*]}"
	echo "IDEM_REDIS_SENTINEL_MASTER=idem"
	echo "IDEM_REDIS_SENTINEL_ADDRS=$(
		IFS=,
		echo "${addrs[*]}"
	)"
	echo "IDEM_REDIS_ADDR=127.0.0.1:$m"
}

# master prints the port of the master the Sentinels name.
master() {
	local s p
	for s in $(cut -d' ' -f3- "$dir/ports"); do
		p=$(cli "$s" sentinel get-master-addr-by-name idem 2>/dev/null | sed -n 2p | tr -d '\r') || continue
		[[ -n $p ]] && { echo "$p"; return 0; }
	done
	return 1
}

kill_master() {
	local p pid i
	p=$(master) || die "no Sentinel names a master"
	pid=$(cat "$dir/$p.pid")
	kill -KILL "$pid"
	for i in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.01
	done
	log "master 127.0.0.1:$p (pid $pid) killed"
	echo "$p"
}

wait_master() {
	local p i
	for i in $(seq 1 600); do
		if p=$(master) && [[ $(cli "$p" role 2>/dev/null | head -1 | tr -d '\r') == master ]]; then
			log "master 127.0.0.1:$p"
			echo "IDEM_REDIS_ADDR=127.0.0.1:$p"
			return 0
		fi
		sleep 0.1
	done
	die "no live master within 60s"
}

stop() {
	local f pid
	for f in "$dir"/*.pid; do
		[[ -e $f ]] || continue
		pid=$(cat "$f")
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$f"
	done
}

[[ $# -eq 2 ]] || die "usage: $0 start|kill|wait|stop DIR"
verb=$1
dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $verb in
start) start ;;
kill) kill_master ;;
wait) wait_master ;;
stop) stop ;;
*) die "usage: $0 start|kill|wait|stop DIR" ;;
esac
