package sim

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
)

// schedules is how many schedules TestSchedules runs: 10^4 (a few seconds
// on two cores), 10^3 under the race detector (see raceEnabled); make test
// runs it both ways, and make sim runs 10^6 through the command.
const schedules = 10_000

// TestSchedules runs the short simulation: every fault class, durable and
// losing stores alternating by seed, every invariant at every step.
func TestSchedules(t *testing.T) {
	n := schedules
	if raceEnabled || testing.Short() {
		n = schedules / 10
	}
	start := time.Now()
	res := Batch(t.Context(), 1, n, runtime.GOMAXPROCS(0), 3, Options{})
	el := time.Since(start)
	st := res.Stats
	t.Logf("%d schedules in %v (%.0f/s): %s", res.Ran, el.Round(time.Millisecond), float64(res.Ran)/el.Seconds(), st)
	for _, r := range res.Shown[:min(3, len(res.Shown))] {
		t.Errorf("%s", r.Report())
	}
	if res.Failed > 0 {
		t.Fatalf("%d of %d schedules broke an invariant", res.Failed, res.Ran)
	}
	if res.Ran != n {
		t.Fatalf("ran %d schedules, want %d", res.Ran, n)
	}
	// The faults happened: a run that drew none would prove nothing.
	if st.Stalls == 0 || st.Crashes == 0 || st.StoreCrashes == 0 || st.LinkFaults == 0 || st.Cancellations == 0 || st.Unstored == 0 ||
		st.Renewals == 0 || st.RenewalsLost == 0 || st.Outages == 0 || st.Pending == 0 || st.Kept == 0 {
		t.Fatalf("some fault class never happened: %s", st)
	}
}

// TestDeterministic: the same seed replays the same schedule, step by step,
// and tracing does not change it.
func TestDeterministic(t *testing.T) {
	seeds := uint64(200)
	if raceEnabled {
		seeds = 50
	}
	runner := NewRunner() // goroutines reused across schedules, as Batch does
	defer runner.Close()
	for seed := uint64(1); seed <= seeds; seed++ {
		for _, k := range []StoreKind{Durable, Losing} {
			a := Run(seed, Options{Store: k, Trace: true})
			b := runner.Run(seed, Options{Store: k, Trace: true})
			c := Run(seed, Options{Store: k})
			if !reflect.DeepEqual(a.Trace, b.Trace) {
				t.Fatalf("seed %d (%s): two runs differ:\n%s\n---\n%s", seed, k, strings.Join(a.Trace, "\n"), strings.Join(b.Trace, "\n"))
			}
			if a.Stats != c.Stats || !reflect.DeepEqual(a.Violations, c.Violations) {
				t.Fatalf("seed %d (%s): tracing changed the schedule: %s vs %s", seed, k, a.Stats, c.Stats)
			}
			if len(a.Trace) < 3 {
				t.Fatalf("seed %d: trace too short: %q", seed, a.Trace)
			}
		}
	}
}

// TestNoGoroutineLeft: crashed workers (parked forever) and zombies are
// ended with their schedule.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	crashes := 0
	for seed := uint64(1); seed <= 300; seed++ {
		crashes += Run(seed, Options{Store: Losing, Mutations: mutant.CompleteWithoutFencing}).Stats.Crashes
		crashes += Run(seed, Options{}).Stats.Crashes
	}
	if crashes == 0 {
		t.Fatal("no worker crashed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines left after the schedules (%d before)", n, before)
	}
}

// TestBatchStops: a cancelled context stops a batch early.
func TestBatchStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res := Batch(ctx, 1, 1000, 2, 1, Options{}); res.Ran != 0 {
		t.Fatalf("ran %d schedules after cancel", res.Ran)
	}
}
