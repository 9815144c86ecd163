package idemtest

import (
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The child cases run only inside the processes TestRealClockAttempts
// starts: each fails or passes the way a real-clock case would.
const childEnv = "IDEMTEST_ATTEMPT_CHILD"

// childSuite returns a real-clock suite whose attempts are judged by a
// wall clock that moves only by what the suite sleeps and by stall, so that
// a loaded machine running the child changes nothing.
func childSuite() (s *suite, stall func(time.Duration)) {
	var elapsed atomic.Int64
	s = &suite{Options: Options{Unit: 20 * time.Millisecond}, tokens: new(atomic.Uint64), slept: new(atomic.Int64)}
	start := time.Now()
	s.wall = func() time.Time { return start.Add(time.Duration(elapsed.Load())) }
	return s, func(d time.Duration) { elapsed.Add(int64(d)) }
}

// TestAttemptChild is what the child processes run.
func TestAttemptChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("run by TestRealClockAttempts in a child process")
	}
	var calls atomic.Int32
	s, stall := childSuite()
	s.runCase(t, func(s *suite, t testing.TB) {
		n := calls.Add(1)
		t.Logf("call %d, unit %v", n, s.Unit)
		switch mode {
		case "wrong": // a store that is wrong without any stall
			s.sleep(s.Unit)
			stall(s.Unit) // the sleep, and nothing more
			assertTrue(t, false, "the store is wrong")
		case "stall-once": // one stall of several leases, then a machine that keeps up
			if n == 1 {
				stall(10 * s.Unit) // not s.sleep: the case did not mean to wait
				requireTrue(t, false, "the lease lapsed while the machine stalled")
			}
		case "stall-always":
			stall(10 * s.Unit)
			assertTrue(t, false, "the lease lapsed while the machine stalled")
		case "wrong-fatal-then-ok": // FailNow stops an attempt, not the process
			requireTrue(t, false, "stopped")
			t.Error("not reached")
		}
	})
}

// TestRealClockAttempts: a real-clock case that fails while the machine
// kept up fails at once; one that failed across a measured stall runs again
// with a longer unit, and fails only if every attempt does.
func TestRealClockAttempts(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("child")
	}
	for _, c := range []struct {
		mode     string
		pass     bool
		calls    int
		contains []string
	}{
		{mode: "wrong", pass: false, calls: 1, contains: []string{"attempt_test.go:", "the store is wrong"}},
		{mode: "stall-once", pass: true, calls: 2, contains: []string{"prove nothing", "running again with a unit of 40ms", "the lease lapsed"}},
		{mode: "stall-always", pass: false, calls: realClockAttempts, contains: []string{"attempt 3 of 3", "the lease lapsed"}},
		{mode: "wrong-fatal-then-ok", pass: false, calls: 1, contains: []string{"stopped"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestAttemptChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+c.mode)
			out, err := cmd.CombinedOutput()
			if c.pass && err != nil {
				t.Fatalf("the child failed: %v\n%s", err, out)
			}
			if !c.pass && err == nil {
				t.Fatalf("the child passed:\n%s", out)
			}
			if got := strings.Count(string(out), "call "); got != c.calls {
				t.Errorf("the case ran %d times, want %d:\n%s", got, c.calls, out)
			}
			if strings.Contains(string(out), "not reached") {
				t.Errorf("FailNow did not stop the attempt:\n%s", out)
			}
			for _, s := range c.contains {
				if !strings.Contains(string(out), s) {
					t.Errorf("the output lacks %q:\n%s", s, out)
				}
			}
		})
	}
}
