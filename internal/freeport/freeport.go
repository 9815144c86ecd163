// Package freeport picks TCP ports of 127.0.0.1 for the servers the tests
// start (redis-server, PostgreSQL, MariaDB), by the policy of
// scripts/lib.sh's free_ports, with which it shares its reservations.
//
// Two hazards make "bind to port 0, close, start the server on that port"
// fail on a machine running many tests at once:
//
//   - A port the kernel hands out for a bind to port 0 comes from its
//     ephemeral range (net.ipv4.ip_local_port_range), and so does the local
//     port of every outgoing connection: one of the tests' many connections
//     may take it before the server binds it (CI: "bind: Address already in
//     use"). Pick draws from below the range instead.
//   - The harnesses restart a server on its port after an outage (a
//     PostgreSQL restart, a MariaDB crash, a Redis kill). While it is down the
//     port looks free to another process's check. Every port picked is
//     therefore reserved, in a directory every picker reads (Dir), for the
//     process that will restart the server, and no picker hands it out
//     while that process lives.
//
// A server that still loses its port (to a program that picks by other
// rules) is started again on another by the scripts.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Low is the lowest port Pick returns (unless IDEM_PORTS_RANGE says
// otherwise).
const Low = 10000

// Dir is the directory of reservations: a file named for each reserved
// port holds the PID of its owner, and the file ".lock" serializes the
// pickers (flock). IDEM_PORTS_DIR overrides it.
func Dir() string {
	if d := os.Getenv("IDEM_PORTS_DIR"); d != "" {
		return d
	}
	return "/tmp/idemgen-ports"
}

// Pick returns a port of 127.0.0.1 that can be bound now, below the
// kernel's ephemeral range, such that port+gap can be bound too (a Redis
// Cluster node's bus is port+10000; gap 0 asks for the port alone), none of
// taken and none reserved by a live process. It reserves the port (and
// port+gap) for this process, until Release or this process's end. When
// the range leaves no room below it, the kernel picks.
func Pick(gap int, taken ...int) (int, error) {
	if gap < 0 {
		return 0, fmt.Errorf("freeport: negative gap %d", gap)
	}
	unlock, err := lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	// Every port of the range once, from a random one on; when the
	// range leaves no room below it, a thousand of the kernel's picks.
	lo, hi, err := Range()
	if err != nil {
		return 0, err
	}
	hi -= gap
	size := hi - lo + 1
	below := size >= 100
	start := 0
	if below {
		start = rand.IntN(size)
	} else {
		size = 1000
	}
	for i := range size {
		p := lo + (start+i)%size
		if !below {
			if p, err = kernelPort(); err != nil {
				return 0, err
			}
		}
		if p+gap > 65535 || slices.Contains(taken, p) || Reserved(p) || (gap > 0 && Reserved(p+gap)) {
			continue
		}
		// A reservation this process may not write (another user's
		// ended one, in the shared directory) passes the port over.
		if Bindable(p) && (gap == 0 || Bindable(p+gap)) && reserve(p) == nil {
			if gap == 0 || reserve(p+gap) == nil {
				return p, nil
			}
			Release(p)
		}
	}
	return 0, errors.New("freeport: no free port found")
}

// Release ends this process's reservations of ports (a server stopped for
// good).
func Release(ports ...int) {
	me := strconv.Itoa(os.Getpid())
	for _, p := range ports {
		f := filepath.Join(Dir(), strconv.Itoa(p))
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == me {
			_ = os.Remove(f)
		}
	}
}

// Reserved reports whether a live process holds a reservation of port.
func Reserved(port int) bool {
	b, err := os.ReadFile(filepath.Join(Dir(), strconv.Itoa(port)))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// reserve writes port's reservation file, readable and writable by every
// user (the directory is shared), for this process.
func reserve(port int) error {
	f := filepath.Join(Dir(), strconv.Itoa(port))
	err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o666)
	if err == nil {
		err = os.Chmod(f, 0o666) // past the umask
	}
	if err != nil {
		return fmt.Errorf("freeport: reserve %d: %w", port, err)
	}
	return nil
}

// lock takes the pickers' lock (Dir()/.lock), creating the directory,
// shared by every user (sticky, as /tmp is).
func lock() (func(), error) {
	d := Dir()
	if err := os.MkdirAll(d, 0o777); err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	_ = os.Chmod(d, 0o777|os.ModeSticky)
	// Read-only: flock needs no more, and another user may have created
	// the file.
	f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_CREATE|os.O_RDONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("freeport: lock %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close() }, nil
}

// Range is the range of ports Pick draws from, lo to hi inclusive (a
// port's gap must fit below hi too): Low up to the kernel's ephemeral
// range, or IDEM_PORTS_RANGE ("LO-HI").
func Range() (lo, hi int, err error) {
	r := os.Getenv("IDEM_PORTS_RANGE")
	if r == "" {
		return Low, EphemeralLow() - 1, nil
	}
	a, b, ok := strings.Cut(r, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("freeport: IDEM_PORTS_RANGE=%q: want LO-HI, 1 <= LO <= HI <= 65535", r)
	}
	return lo, hi, nil
}

// EphemeralLow is the first port of the kernel's ephemeral range (32768
// when /proc does not say).
func EphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 32768
	}
	return n
}

// Bindable reports whether a listener can bind 127.0.0.1:port now.
func Bindable(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
