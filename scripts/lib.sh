# lib.sh holds what the server scripts (pg.sh, mariadb.sh, redis.sh,
# redis-cluster.sh) and promtool.sh share. Source it after defining die.

# free_ports N [GAP [TAKEN...]] prints N distinct TCP ports of 127.0.0.1, one
# a line, that can be bound now (and, with GAP, so can port+GAP: a Redis
# Cluster node's bus), none of them in TAKEN, and reserves them for the
# script's parent process. Two hazards made "bind to port 0, close, start
# the server" fail on a machine running many tests (internal/freeport, which
# keeps the same policy and reservations, says more):
#   - bind(0) hands out ports of the kernel's ephemeral range
#     (net.ipv4.ip_local_port_range), as it does for the local port of every
#     outgoing connection, and one of the tests' connections took such a port
#     before the server bound it (CI: "bind: Address already in use"). The
#     ports are drawn at random from below that range instead.
#   - The test harnesses restart a server on its port after an outage, and
#     meanwhile the port looks free. Every port handed out is reserved in
#     $IDEM_PORTS_DIR (default /tmp/idemgen-ports: a file per port holding
#     the owner's PID; the pickers take DIR/.lock in turn) for the script's
#     parent, the process that restarts or stops the server (the harness, or
#     with-services.sh), and no picker hands it out while that process
#     lives.
# A server that still loses its port starts again on another (bind_failed).
# IDEM_PORTS_RANGE=LO-HI draws from that range instead. When the range
# leaves no room below it, the kernel picks. python3 does the picking (as
# internal/freeport does in Go; TestReservations holds both to one
# expectation).
free_ports() {
	local n=$1 gap=${2:-0} owner=${IDEM_PORT_OWNER:-$PPID} pdir=${IDEM_PORTS_DIR:-/tmp/idemgen-ports}
	shift $(($# < 2 ? $# : 2))
	mkdir -p "$pdir" && chmod 1777 "$pdir" 2>/dev/null || true
	command -v python3 >/dev/null 2>&1 || die "python3 is needed to find free ports"
	python3 - "$n" "$gap" "$owner" "$pdir" "$@" <<'PY'
import fcntl, os, random, socket, sys

n, gap, owner, pdir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
taken = {int(p) for p in sys.argv[5:]}
if os.environ.get("IDEM_PORTS_RANGE"):
    try:
        lo, hi = (int(x) for x in os.environ["IDEM_PORTS_RANGE"].split("-"))
        assert 1 <= lo <= hi <= 65535
    except (ValueError, AssertionError):
        sys.exit("free_ports: IDEM_PORTS_RANGE=%r: want LO-HI, 1 <= LO <= HI <= 65535" % os.environ["IDEM_PORTS_RANGE"])
else:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = 10000, int(f.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        lo, hi = 10000, 32767
hi -= gap


def bindable(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


def reserved(p):
    try:
        with open(os.path.join(pdir, str(p))) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def reserve(p):
    f = os.path.join(pdir, str(p))
    try:
        with open(f, "w") as w:
            w.write("%d\n" % owner)
        os.chmod(f, 0o666)  # every user's, past the umask
        return True
    except OSError:
        return False


# Read-only: flock needs no more, and another user may have created it.
lock = os.open(os.path.join(pdir, ".lock"), os.O_RDONLY | os.O_CREAT, 0o666)
fcntl.flock(lock, fcntl.LOCK_EX)
# Every port of the range once, from a random one on; when the range
# leaves no room below it, the kernel's picks.
size = hi - lo + 1
start = random.randrange(size) if size >= 100 else 0
out = []
for i in range(size if size >= 100 else 1000):
    if len(out) == n:
        break
    if size >= 100:
        p = lo + (start + i) % size
    else:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
    if p in taken or p in out or p + gap > 65535 or reserved(p) or (gap and reserved(p + gap)):
        continue
    # A reservation this user may not write (another user's ended one, in
    # the shared directory) passes the port over.
    if bindable(p) and (gap == 0 or bindable(p + gap)) and reserve(p):
        if gap == 0 or reserve(p + gap):
            out.append(p)
        else:
            os.remove(os.path.join(pdir, str(p)))
if len(out) < n:
    sys.exit("free_ports: found %d free ports of %d" % (len(out), n))
print("\n".join(map(str, out)))
PY
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
# then apt-get install --no-install-recommends --no-upgrade (a package
# installed already is left as it is). with-services.sh starts its
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
		apt-get "${wait[@]}" update >&2 && apt-get "${wait[@]}" install -y --no-install-recommends --no-upgrade "$@" >&2
		return
	fi
	(
		flock -w 900 9 || { echo "waited 15 minutes for another install ($lock)" >&2; exit 1; }
		apt-get "${wait[@]}" update >&2 && apt-get "${wait[@]}" install -y --no-install-recommends --no-upgrade "$@" >&2
	) 9>"$lock"
}
