#!/usr/bin/env bash
# galera.sh starts a throwaway three-node MariaDB Galera cluster on
# loopback, kills one node, and stops it: the Galera scenario
# (internal/stress/mysqlstress, make failover) runs on it.
#
#   scripts/galera.sh start DIR    # prints IDEM_GALERA_DSNS=DSN1,DSN2,DSN3
#   scripts/galera.sh kill DIR N   # SIGKILL node N (1..3)
#   scripts/galera.sh stop DIR
#
# start installs mariadb-server and galera-4 if absent (as root), creates a
# data directory for node 1 (mariadb-install-db), bootstraps the cluster on
# it (--wsrep-new-cluster), then starts nodes 2 and 3, which join it and
# receive its state by rsync (wsrep_sst_method=rsync), waits until
# wsrep_cluster_size is 3 and every node is Synced, creates the database
# "idem" (replicated to every node) and prints the three nodes' DSNs, in
# go-sql-driver/mysql's form, comma-separated. Each node listens on
# 127.0.0.1 only: its SQL port, its group communication port (gcomm://),
# its IST and its SST port, all from lib.sh's free_ports. Every node runs as
# the mysql user when this is root; its PID is in DIR/nodeN.pid, and kill
# and stop act on those PIDs only.
#
# The nodes are fast and not crash-safe on their own disks
# (innodb_flush_log_at_trx_commit=2): Galera's durability is the
# cluster's (a commit is certified by every node before it is acknowledged,
# and applied on each asynchronously).
set -euo pipefail

log() { printf 'galera.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # free_ports, apt_install

provider=/usr/lib/galera/libgalera_smm.so

client() {
	local n=$1
	shift
	mariadb --no-defaults -uroot --socket="$dir/node$n/mysqld.sock" "$@"
}

status() { client "$1" -N -e "SHOW STATUS LIKE '$2'" 2>/dev/null | awk '{print $2}'; }

start_node() {
	local n=$1 new=${2:-} pid i
	read -r sql gc ist sst <"$dir/node$n/ports"
	local args=(--no-defaults --datadir="$dir/node$n/data" --bind-address=127.0.0.1 --port="$sql"
		--socket="$dir/node$n/mysqld.sock" --pid-file="$dir/node$n/mysqld.pid" --log-error="$dir/node$n/mariadb.log"
		--skip-name-resolve --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=64M
		--max-connections=300 --character-set-server=utf8mb4
		--binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2
		--wsrep-on=ON --wsrep-provider="$provider" --wsrep-cluster-name=idem
		--wsrep-cluster-address="gcomm://$gcomm" --wsrep-node-name="node$n" --wsrep-node-address="127.0.0.1:$gc"
		--wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:$gc;ist.recv_addr=127.0.0.1:$ist;base_port=$gc"
		--wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$sst")
	[[ $(id -u) -eq 0 ]] && args+=(--user=mysql)
	[[ -n $new ]] && args+=(--wsrep-new-cluster)
	/usr/sbin/mariadbd "${args[@]}" >/dev/null 2>&1 &
	pid=$!
	echo "$pid" >"$dir/node$n.pid"
	for i in $(seq 1 600); do
		[[ $(status "$n" wsrep_local_state_comment) == Synced ]] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 30 "$dir/node$n/mariadb.log" >&2 || true
	die "node $n did not reach Synced"
}

start() {
	if [[ ! -x /usr/sbin/mariadbd || ! -e $provider ]]; then
		log "installing mariadb-server, galera-4, rsync (apt-get)"
		apt_install mariadb-server mariadb-client galera-4 rsync || die "apt-get install failed"
	fi
	command -v rsync >/dev/null 2>&1 || die "rsync is needed for the state transfer (package rsync)"
	local ports n i
	mapfile -t ports < <(free_ports 12)
	gcomm="127.0.0.1:${ports[1]},127.0.0.1:${ports[5]},127.0.0.1:${ports[9]}"
	echo "$gcomm" >"$dir/gcomm"
	echo "${ports[*]}" >"$dir/ports"
	[[ $(id -u) -eq 0 ]] && { chown mysql "$dir"; chmod 0755 "$dir"; }
	for n in 1 2 3; do
		mkdir -p "$dir/node$n/data"
		echo "${ports[*]:$(((n - 1) * 4)):4}" >"$dir/node$n/ports"
		[[ $(id -u) -eq 0 ]] && chown -R mysql "$dir/node$n"
	done
	local user=$(id -un)
	[[ $(id -u) -eq 0 ]] && user=mysql
	mariadb-install-db --no-defaults --user="$user" --datadir="$dir/node1/data" --auth-root-authentication-method=normal \
		--skip-test-db >"$dir/install.log" 2>&1 || { cat "$dir/install.log" >&2; die "mariadb-install-db failed"; }
	start_node 1 new
	client 1 -e "CREATE DATABASE IF NOT EXISTS idem;
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" >&2
	start_node 2
	start_node 3
	for i in $(seq 1 300); do
		[[ $(status 1 wsrep_cluster_size) == 3 ]] && break
		[[ $i -eq 300 ]] && die "the cluster did not reach 3 nodes"
		sleep 0.1
	done
	log "$(/usr/sbin/mariadbd --version | head -n 1), Galera cluster of 3 on 127.0.0.1: SQL ports ${ports[0]}, ${ports[4]}, ${ports[8]}; pids $(cat "$dir"/node*.pid | tr '\n' ' ')"
	printf 'IDEM_GALERA_DSNS=root@tcp(127.0.0.1:%s)/idem,root@tcp(127.0.0.1:%s)/idem,root@tcp(127.0.0.1:%s)/idem\n' "${ports[0]}" "${ports[4]}" "${ports[8]}"
}

kill_node() {
	local n=$1 pid i
	[[ -s "$dir/node$n.pid" ]] || die "node $n is not running"
	pid=$(cat "$dir/node$n.pid")
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.01
	done
	rm -f "$dir/node$n.pid"
	log "node $n (pid $pid) killed"
}

stop() {
	local f pid
	for f in "$dir"/node*.pid; do
		[[ -e $f ]] || continue
		pid=$(cat "$f")
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$f"
	done
	# The rsync daemons of a state transfer, if one was in flight.
	for f in "$dir"/node*/data/rsync_sst.pid; do
		[[ -s $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
	done
}

[[ $# -ge 2 ]] || die "usage: $0 start DIR | kill DIR N | stop DIR"
verb=$1
dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $verb in
start) start ;;
kill) kill_node "${3:?node number}" ;;
stop) stop ;;
*) die "usage: $0 start DIR | kill DIR N | stop DIR" ;;
esac
