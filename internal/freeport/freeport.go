// Package freeport picks TCP ports of 127.0.0.1 for the servers the tests
// start (redis-server, PostgreSQL, MariaDB), by the policy of
// scripts/lib.sh's free_ports.
//
// A port the kernel hands out for a bind to port 0 comes from its ephemeral
// range (net.ipv4.ip_local_port_range), and so does the local port of every
// outgoing connection. A port picked that way and released again may be
// taken by one of the many connections of the tests beside it before the
// server binds it, or while a test has the server down to restart it on the
// same port (CI: "bind: Address already in use"). Pick draws from below the
// range instead, where only another server can take a port: the starters
// retry on another port when that happens.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Low is the lowest port Pick returns.
const Low = 10000

// Pick returns a port of 127.0.0.1 that can be bound now, below the
// kernel's ephemeral range, such that port+gap can be bound too (a Redis
// Cluster node's bus is port+10000; gap 0 asks for the port alone) and none
// of taken. When the range leaves no room below it, the kernel picks.
func Pick(gap int, taken ...int) (int, error) {
	if gap < 0 {
		return 0, fmt.Errorf("freeport: negative gap %d", gap)
	}
	hi := EphemeralLow() - 1 - gap
	for range 10000 {
		var p int
		if hi-Low >= 100 {
			p = Low + rand.IntN(hi-Low+1)
		} else {
			var err error
			if p, err = kernelPort(); err != nil {
				return 0, err
			}
		}
		if p+gap > 65535 || slices.Contains(taken, p) {
			continue
		}
		if Bindable(p) && (gap == 0 || Bindable(p+gap)) {
			return p, nil
		}
	}
	return 0, errors.New("freeport: no free port found")
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
