package freeport_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
)

// checkPorts asserts the policy on ports picked with gap and taken: each
// is at least Low, below the ephemeral range with its gap, bindable with its
// gap, distinct, and none of taken.
func checkPorts(t *testing.T, ports []int, gap int, taken ...int) {
	t.Helper()
	eph := freeport.EphemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		assert.GreaterOrEqual(t, p, freeport.Low)
		assert.Less(t, p+gap, eph, "port %d (+%d) is in the ephemeral range, from %d on", p, gap, eph)
		assert.False(t, seen[p], "port %d twice", p)
		assert.NotContains(t, taken, p)
		seen[p] = true
	}
}

func TestPick(t *testing.T) {
	for _, gap := range []int{0, 10000} {
		t.Run(strconv.Itoa(gap), func(t *testing.T) {
			var ports []int
			for range 50 {
				p, err := freeport.Pick(gap, ports...)
				require.NoError(t, err)
				assert.True(t, freeport.Bindable(p))
				if gap > 0 {
					assert.True(t, freeport.Bindable(p+gap))
				}
				ports = append(ports, p)
			}
			checkPorts(t, ports, gap)
		})
	}
	_, err := freeport.Pick(-1)
	assert.Error(t, err)
}

// TestPickSkipsHeld: a port a listener holds is never picked.
func TestPickSkipsHeld(t *testing.T) {
	var held []int
	for range 20 {
		p, err := freeport.Pick(0, held...)
		require.NoError(t, err)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		held = append(held, p)
	}
	for range 200 {
		p, err := freeport.Pick(0)
		require.NoError(t, err)
		assert.NotContains(t, held, p)
	}
}

func scripts(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../scripts")
	require.NoError(t, err)
	return dir
}

func bash(t *testing.T, env []string, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Logf("stderr: %s", stderr.String())
	}
	return string(out), err
}

func ints(t *testing.T, out string) []int {
	t.Helper()
	var ps []int
	for _, f := range strings.Fields(out) {
		p, err := strconv.Atoi(f)
		require.NoError(t, err, "%q", out)
		ps = append(ps, p)
	}
	return ps
}

// TestScriptFreePorts: scripts/lib.sh's free_ports keeps the same policy,
// and without python3, which does its picking, it says so.
func TestScriptFreePorts(t *testing.T) {
	lib := filepath.Join(scripts(t), "lib.sh")
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is not installed: scripts/lib.sh's free_ports needs it")
	}
	for _, gap := range []int{0, 10000} {
		taken := []int{}
		for p := freeport.Low; p < freeport.Low+40; p++ {
			taken = append(taken, p)
		}
		args := []string{lib, "8", strconv.Itoa(gap)}
		for _, p := range taken {
			args = append(args, strconv.Itoa(p))
		}
		out, err := bash(t, nil, `die() { echo "$*" >&2; exit 1; }; . "$1"; shift; free_ports "$@"`, args...)
		require.NoError(t, err)
		ps := ints(t, out)
		require.Len(t, ps, 8)
		checkPorts(t, ps, gap, taken...)
	}
	out, err := bash(t, nil, `die() { echo "$*" >&2; exit 1; }; . "$1"; free_port`, lib)
	require.NoError(t, err)
	require.Len(t, ints(t, out), 1)

	noPy := t.TempDir()
	for _, tool := range []string{"bash", "mkdir", "chmod"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(p, filepath.Join(noPy, tool)))
	}
	out, err = bash(t, []string{"PATH=" + noPy}, `die() { echo "$*"; exit 1; }; . "$1"; free_port`, lib)
	require.Error(t, err)
	assert.Contains(t, out, "python3 is needed")
}

// TestScriptBindFailed: lib.sh's bind_failed knows each server's words for
// a port it could not bind, and reads only from the offset given.
func TestScriptBindFailed(t *testing.T) {
	lib := filepath.Join(scripts(t), "lib.sh")
	for _, tc := range []struct {
		name, log string
		offset    int
		want      bool
	}{
		{"redis", "# Warning: Could not create server TCP listening socket 127.0.0.1:54251: bind: Address already in use\n", 0, true},
		{"postgres", "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use\nFATAL:  could not create any TCP/IP sockets\n", 0, true},
		{"mariadb", "[ERROR] Can't start server: Bind on TCP/IP port. Got error: 98: Address already in use\n[ERROR] Do you already have another server running on port: 3306 ?\n", 0, true},
		{"other failure", "FATAL:  data directory \"/x\" has invalid permissions\n", 0, false},
		{"an earlier attempt's", "bind: Address already in use\nready to accept connections\n", len("bind: Address already in use\n"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "log")
			require.NoError(t, os.WriteFile(f, []byte(tc.log), 0o644))
			_, err := bash(t, nil, `. "$1"; bind_failed "$2" "$3"`, lib, f, strconv.Itoa(tc.offset))
			assert.Equal(t, tc.want, err == nil, "%v", err)
		})
	}
}

// deadPID is the PID of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// fillReservations reserves every port Pick may hand out, by a live
// process (PID 1), but free ones, which a process that has ended reserved.
// It returns the reservations' directory.
func fillReservations(t *testing.T, free []int) string {
	t.Helper()
	dir := t.TempDir()
	dead := strconv.Itoa(deadPID(t)) + "\n"
	lo, hi, err := freeport.Range()
	require.NoError(t, err)
	for p := lo; p <= hi; p++ {
		owner := "1\n"
		if slices.Contains(free, p) {
			owner = dead
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(p)), []byte(owner), 0o644))
	}
	return dir
}

// TestReservations: a port a live process reserved is never handed out,
// though it can be bound (its server is down for a restart); a port whose
// owner has ended is; a port handed out is reserved for the process that
// asked, by Pick and by scripts/lib.sh's free_ports alike.
func TestReservations(t *testing.T) {
	if err := syscall.Kill(1, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		t.Skip("no process 1 to own reservations")
	}
	// A range of 300 ports, 4 of them free (the scan covers a range of at
	// least 100 ports; a smaller one is left to the kernel).
	q, err := freeport.Pick(0)
	require.NoError(t, err)
	freeport.Release(q)
	lo := min(q, freeport.EphemeralLow()-300)
	var free []int
	for p := lo; p < lo+300 && len(free) < 4; p += 7 {
		if !freeport.Reserved(p) && freeport.Bindable(p) {
			free = append(free, p)
		}
	}
	require.Len(t, free, 4)
	t.Setenv("IDEM_PORTS_RANGE", fmt.Sprintf("%d-%d", lo, lo+299))
	t.Run("Pick", func(t *testing.T) {
		dir := fillReservations(t, free)
		t.Setenv("IDEM_PORTS_DIR", dir)
		var got []int
		for range free {
			p, err := freeport.Pick(0)
			require.NoError(t, err)
			assert.True(t, freeport.Reserved(p), "port %d handed out but not reserved", p)
			got = append(got, p)
		}
		assert.ElementsMatch(t, free, got)
		_, err := freeport.Pick(0)
		assert.Error(t, err, "every port is reserved")
		freeport.Release(got...)
		for _, p := range got {
			assert.False(t, freeport.Reserved(p), "port %d still reserved after Release", p)
		}
	})
	t.Run("free_ports", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("python3 is not installed")
		}
		dir := fillReservations(t, free)
		out, err := bash(t, []string{"IDEM_PORTS_DIR=" + dir, "IDEM_PORT_OWNER=" + strconv.Itoa(os.Getpid())},
			`die() { echo "$*" >&2; exit 1; }; . "$1"; free_ports 4`, filepath.Join(scripts(t), "lib.sh"))
		require.NoError(t, err)
		assert.ElementsMatch(t, free, ints(t, out))
		t.Setenv("IDEM_PORTS_DIR", dir)
		for _, p := range free {
			assert.True(t, freeport.Reserved(p), "port %d handed out but not reserved", p)
		}
		freeport.Release(free...)
	})
}

// TestReservationsOtherUser: a user other than the one who reserved ports
// before (root's `make test`, then a developer's own) picks too: the lock
// file and the ended reservations it may not write are root's, and the
// ports of those are passed over, not a failure.
func TestReservationsOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run free_ports as another user")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		t.Skip("no runuser")
	}
	dir, err := os.MkdirTemp("", "idem-ports-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o644))
	q, err := freeport.Pick(0)
	require.NoError(t, err)
	freeport.Release(q)
	lo := min(q, freeport.EphemeralLow()-300)
	// Root's ended reservations, read-only to others, on 5 ports of 6.
	dead := strconv.Itoa(deadPID(t)) + "\n"
	readOnly := map[int]bool{}
	for p := lo; p < lo+300; p++ {
		if p%6 != 0 {
			require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(p)), []byte(dead), 0o644))
			readOnly[p] = true
		}
	}
	// A copy nobody can read, wherever the checkout is.
	b, err := os.ReadFile(filepath.Join(scripts(t), "lib.sh"))
	require.NoError(t, err)
	lib := filepath.Join(dir, "lib.sh")
	require.NoError(t, os.WriteFile(lib, b, 0o644))
	cmd := exec.Command(runuser, "-u", "nobody", "--", "bash", "-c", `die() { echo "$*" >&2; exit 1; }; . "$1"; free_ports 4`, "bash", lib)
	cmd.Env = append(os.Environ(), "IDEM_PORTS_DIR="+dir, fmt.Sprintf("IDEM_PORTS_RANGE=%d-%d", lo, lo+299),
		"IDEM_PORT_OWNER="+strconv.Itoa(os.Getpid()))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	ps := ints(t, string(out))
	require.Len(t, ps, 4)
	for _, p := range ps {
		assert.False(t, readOnly[p], "port %d: root's read-only reservation handed out", p)
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(p)))
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(b)), "port %d not reserved", p)
	}
}
