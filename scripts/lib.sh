# lib.sh holds what the server scripts (pg.sh, mariadb.sh, redis.sh) share.
# Source it after defining die.

# free_port asks the kernel for a free TCP port on 127.0.0.1 (bind to port
# 0, then release it), or, without python3, probes random ports.
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
		return
	fi
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			printf '%s\n' "$p"
			return
		fi
	done
	die "no free port found"
}
