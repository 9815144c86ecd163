#!/usr/bin/env bash
# redis.sh — a throwaway redis-server for the tests.
#
#   scripts/redis.sh start DIR   install redis-server if absent (as root), start
#                                it on a free 127.0.0.1 port with no persistence,
#                                wait for PING and print one line on stdout:
#                                IDEM_REDIS_ADDR=127.0.0.1:PORT
#   scripts/redis.sh stop DIR    kill the server started in DIR (by DIR/redis.pid)
#
# Diagnostics go to stderr; the server's log is DIR/redis.log.
set -euo pipefail

die() { echo "redis.sh: $*" >&2; exit 1; }

usage() { die "usage: $0 start|stop DIR"; }

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

install_redis() {
	command -v redis-server >/dev/null 2>&1 && return 0
	echo "redis.sh: installing redis-server" >&2
	apt_install redis-server || die "apt-get install redis-server failed"
	command -v redis-server >/dev/null 2>&1 || die "redis-server still not found after install"
}

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_port, apt_install

ping() {
	# PING over /dev/tcp so that redis-cli is not required.
	local port=$1 reply
	exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
	printf 'PING\r\n' >&3
	read -r -t 1 reply <&3 || { exec 3>&-; return 1; }
	exec 3>&-
	[[ $reply == +PONG* ]]
}

start() {
	install_redis
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
		die "a redis-server started in $dir is already running (pid $(cat "$dir/redis.pid"))"
	fi
	local attempt port pid
	for attempt in 1 2 3; do
		port=$(free_port)
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
			--dir "$dir" --daemonize no >"$dir/redis.log" 2>&1 </dev/null &
		pid=$!
		echo "$pid" >"$dir/redis.pid"
		for _ in $(seq 1 100); do
			if ! kill -0 "$pid" 2>/dev/null; then break; fi
			if ping "$port" 2>/dev/null; then
				echo "IDEM_REDIS_ADDR=127.0.0.1:$port"
				return 0
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		rm -f "$dir/redis.pid"
		echo "redis.sh: redis-server on port $port did not answer (attempt $attempt); log:" >&2
		tail -n 5 "$dir/redis.log" >&2 || true
	done
	die "could not start redis-server"
}

stop() {
	local pidfile=$dir/redis.pid pid
	[ -f "$pidfile" ] || { echo "redis.sh: no $pidfile; nothing to stop" >&2; return 0; }
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
}

case $cmd in
start) start ;;
stop) stop ;;
*) usage ;;
esac
