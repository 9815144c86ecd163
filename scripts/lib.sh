# lib.sh holds what the server scripts (pg.sh, mariadb.sh, redis.sh,
# redis-cluster.sh) and promtool.sh share. Source it after defining die.

# free_ports N [GAP [TAKEN...]] prints N distinct TCP ports of 127.0.0.1, one
# a line, that can be bound now (and, with GAP, so can port+GAP: a Redis
# Cluster node's bus), none of them in TAKEN. They are drawn at random from
# below the kernel's ephemeral range (net.ipv4.ip_local_port_range), never
# from it: a port the kernel hands out for bind(0) is also one it hands out
# as the local port of an outgoing connection, and on a machine running many
# tests one of their connections took such a port between the check and the
# server's bind (CI: "bind: Address already in use"). Below the range only
# another server can take the port; the scripts start again on new ports
# when that happens. When the range leaves no room below it, the kernel
# picks (bind to port 0). Without python3, ports are probed with bash's
# /dev/tcp (nothing answers on them).
free_ports() {
	local n=$1 gap=${2:-0}
	shift $(($# < 2 ? $# : 2))
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$n" "$gap" "$@" <<'PY'
import random, socket, sys

n, gap = int(sys.argv[1]), int(sys.argv[2])
taken = {int(p) for p in sys.argv[3:]}
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        eph = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    eph = 32768
lo, hi = 10000, eph - 1 - gap


def bindable(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


out = []
for _ in range(100000):
    if len(out) == n:
        break
    if hi - lo >= 100 * n:
        p = random.randint(lo, hi)
    else:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
    if p in taken or p in out or p + gap > 65535:
        continue
    if bindable(p) and (gap == 0 or bindable(p + gap)):
        out.append(p)
if len(out) < n:
    sys.exit("free_ports: found %d free ports of %d" % (len(out), n))
print("\n".join(map(str, out)))
PY
		return
	fi
	local p out=() t ok span=$((32768 - 10000 - gap))
	[ "$span" -gt 0 ] || die "free_ports: no port below 32768 leaves room for a gap of $gap"
	for _ in $(seq 1 10000); do
		[ ${#out[@]} -ge "$n" ] && break
		p=$((10000 + RANDOM % span))
		ok=1
		for t in "$@" "${out[@]}"; do [ "$t" = "$p" ] && ok=0; done
		[ $ok = 1 ] || continue
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		[ "$gap" = 0 ] || ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + gap))") 2>/dev/null || continue
		out+=("$p")
	done
	[ ${#out[@]} -ge "$n" ] || die "no free port found"
	printf '%s\n' "${out[@]}"
}

# free_port prints one port as free_ports does.
free_port() { free_ports 1; }

# bind_failed FILE [OFFSET] is true when FILE, from byte OFFSET on, says a
# server could not bind its port: another server took it after free_ports
# checked it, and the caller starts again on another port.
bind_failed() {
	tail -c +"$((${2:-0} + 1))" "$1" 2>/dev/null | grep -qiE 'address already in use|could not bind|another server running on port'
}

# apt_install PKG... installs Debian packages, as root: apt-get update,
# then apt-get install --no-install-recommends. with-services.sh starts its
# four servers at once, so on a new machine up to three scripts install at
# once, and a second apt-get fails at once on dpkg's lock ("Could not get
# lock /var/lib/dpkg/lock-frontend"). Every install of these scripts holds
# one lock file (flock) for its whole run, and apt-get waits up to 5 minutes
# for a lock held by an apt-get these scripts did not start.
apt_install() {
	[ "$(id -u)" = 0 ] || die "not installed, and this is not root: apt-get install $*"
	export DEBIAN_FRONTEND=noninteractive
	local lock=/tmp/idemgen-apt.lock wait=(-o DPkg::Lock::Timeout=300)
	if ! command -v flock >/dev/null 2>&1; then
		apt-get "${wait[@]}" update >&2 && apt-get "${wait[@]}" install -y --no-install-recommends "$@" >&2
		return
	fi
	(
		flock -w 900 9 || { echo "waited 15 minutes for another install ($lock)" >&2; exit 1; }
		apt-get "${wait[@]}" update >&2 && apt-get "${wait[@]}" install -y --no-install-recommends "$@" >&2
	) 9>"$lock"
}
