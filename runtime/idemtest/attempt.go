package idemtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// On a real clock a case's leases and TTLs are short (Unit, 150ms by
// default), and each case assumes that the machine runs its steps in about
// the time it sleeps: a claim checked as "held" right after it was made
// fails if the test goroutine was not scheduled for longer than the lease.
// A loaded CI machine cannot keep that promise, so a failed case on a real
// clock is judged by what the clock shows:
//
//   - if the case's wall time exceeded what it slept by less than
//     Unit/stallFraction, the machine kept up and the failure stands;
//   - otherwise the machine stalled for a measurable part of a lease, the
//     failure proves nothing about the store, and the case runs again on
//     fresh keys with twice the Unit, at most realClockAttempts times.
//
// A store that is wrong fails every attempt; each stalled attempt's failures
// are logged, so a retried case is never silent.
const (
	realClockAttempts = 3
	stallFraction     = 4
)

// errAttemptFailed unwinds an attempt stopped by Fatal or FailNow.
var errAttemptFailed = errors.New("idemtest: attempt failed")

// attempt is the testing.TB one run of a real-clock case reports through:
// its failures are kept, not reported, until the runner knows whether the
// machine stalled during the attempt. Everything else (Cleanup, Context,
// Skip, Log, Helper) is the subtest's own.
type attempt struct {
	*testing.T
	mu       sync.Mutex
	failures []string
}

func (a *attempt) fail(msg string) {
	msg = where() + msg
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failures = append(a.failures, strings.TrimSuffix(msg, "\n"))
}

// Error records a failure.
func (a *attempt) Error(args ...any) { a.fail(fmt.Sprintln(args...)) }

// Errorf records a failure.
func (a *attempt) Errorf(format string, args ...any) { a.fail(fmt.Sprintf(format, args...)) }

// Fail records a failure without a message.
func (a *attempt) Fail() { a.fail("failed") }

// FailNow records a failure and stops the attempt. Like testing.T's, it
// must be called from the goroutine running the case.
func (a *attempt) FailNow() {
	a.Fail()
	panic(errAttemptFailed)
}

// Fatal records a failure and stops the attempt.
func (a *attempt) Fatal(args ...any) {
	a.fail(fmt.Sprintln(args...))
	panic(errAttemptFailed)
}

// Fatalf records a failure and stops the attempt.
func (a *attempt) Fatalf(format string, args ...any) {
	a.fail(fmt.Sprintf(format, args...))
	panic(errAttemptFailed)
}

// Failed reports whether the attempt failed so far.
func (a *attempt) Failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.failures) > 0
}

// where names the line of the case that failed (the first caller outside
// the suite's checks), as testing.T would with its Helper marks.
func where() string {
	pcs := make([]uintptr, 16)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if base := filepath.Base(f.File); base != "check.go" && base != "attempt.go" {
			return fmt.Sprintf("%s:%d: ", base, f.Line)
		}
		if !more {
			return ""
		}
	}
}

// testingT returns the subtest behind t, for the Options functions that
// take a *testing.T.
func testingT(t testing.TB) *testing.T {
	if a, ok := t.(*attempt); ok {
		return a.T
	}
	return t.(*testing.T)
}

// runCase runs fn on s. On a fake clock it runs once, reporting to t. On a
// real clock it runs as attempts (see above).
func (s *suite) runCase(t *testing.T, fn func(*suite, testing.TB)) {
	if s.Sleep != nil {
		fn(s, t)
		return
	}
	unit := s.Unit
	for n := 1; ; n++ {
		as := &suite{Options: s.Options, tokens: s.tokens, slept: new(atomic.Int64), wall: s.wall}
		as.Unit = unit
		a := &attempt{T: t}
		start := s.now()
		run(func() { fn(as, a) })
		if !a.Failed() {
			return
		}
		overrun := s.now().Sub(start) - time.Duration(as.slept.Load())
		if overrun < unit/stallFraction || n == realClockAttempts {
			if n > 1 {
				t.Logf("attempt %d of %d, with a unit of %v, took %v longer than it slept", n, realClockAttempts, unit, overrun)
			}
			for _, f := range a.failures {
				t.Error(f)
			}
			t.FailNow()
		}
		t.Logf("attempt %d with a unit of %v took %v longer than it slept (the machine stalled for over a quarter of a lease), so its failures prove nothing; running again with a unit of %v. They were:\n\t%s",
			n, unit, overrun, 2*unit, strings.Join(a.failures, "\n\t"))
		unit *= 2
	}
}

// now reads the wall clock that judges attempts.
func (s *suite) now() time.Time {
	if s.wall != nil {
		return s.wall()
	}
	return time.Now()
}

// run calls fn, stopping where an attempt's FailNow unwinds it.
func run(fn func()) {
	defer func() {
		if r := recover(); r != nil && r != errAttemptFailed { // the sentinel itself, never wrapped
			panic(r)
		}
	}()
	fn()
}
