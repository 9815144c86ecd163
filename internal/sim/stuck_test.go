package sim

import (
	"strings"
	"testing"
	"time"
)

// TestStuckSchedulesReported: a schedule that cannot end is reported as a
// failure naming its seed, never a hang, whichever way it is stuck: a
// goroutine parked with nothing left to wake it (found when the event
// queue drains), one that waits in virtual time forever (maxVirtual), one
// that blocks without yielding the baton (the real-time hang guard,
// Options.stuckAfter, shortened for that case alone: the others keep the
// default, so that a slow hand-over on a loaded machine cannot decide
// their verdict). Renewal is off: a method run that never
// ends under renewal keeps its lease renewed, which maxVirtual reports.
func TestStuckSchedulesReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stick stick
		want  string
	}{
		{"parked-with-no-wake-up", stickStrand, "parked at a wait nobody ends, and nothing left to wake it"},
		{"waiting-forever", stickLoop, "did not end within 10m0s of virtual time"},
		{"blocked-without-yielding", stickBlock, "held the baton for 200ms of real time without yielding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stick == stickBlock && raceEnabled {
				// The blocked goroutine never hands the baton back, so its
				// last writes are never ordered before the report's reads:
				// the race detector says so, by design. make test runs
				// this case without -race.
				t.Skip("a goroutine that never yields cannot be synchronized with")
			}
			var guard time.Duration
			if tc.stick == stickBlock {
				guard = 200 * time.Millisecond
			}
			for _, seed := range []uint64{1, 2, 3} {
				r := Run(seed, Options{Faults: MethodFaults, Renewal: RenewOff, stick: tc.stick, stuckAfter: guard})
				if r.OK() {
					t.Fatalf("seed %d: a stuck schedule passed: %s", seed, r.Stats)
				}
				if v := r.Violations[0]; !strings.Contains(v, "stuck: ") || !strings.Contains(v, tc.want) {
					t.Fatalf("seed %d: violation %q, want a stuck schedule: %q", seed, v, tc.want)
				}
				if rep := r.Report(); !strings.HasPrefix(rep, "seed "+itoa(seed)+" ") || !strings.Contains(rep, "-seed "+itoa(seed)) {
					t.Fatalf("the report does not name seed %d:\n%s", seed, rep)
				}
			}
		})
	}
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
