package idem_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// expiredStore returns a memstore on clock holding n records that expired.
func expiredStore(t *testing.T, clock *fakeClock, n int) *memstore.Store {
	t.Helper()
	st := memstore.New(memstore.WithClock(clock.Now))
	ex := idem.NewExecutor(st, idem.WithClock(clock), idem.SingleTenant())
	m := &idem.Method{Op: "T.Sweep", TTL: time.Second}
	for i := range n {
		_, err := call(t.Context(), ex, m, fmt.Sprint(i), func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	clock.Advance(2 * time.Second)
	return st
}

// flakySweep is a real store's Sweep behind a link that fails the calls
// whose index (from 0) is in fail.
type flakySweep struct {
	idem.Sweepable
	mu    sync.Mutex
	calls int
	fail  map[int]bool
}

var errSweepLink = errors.New("sweep link down")

func (f *flakySweep) Sweep(ctx context.Context, limit int) (int, error) {
	f.mu.Lock()
	n := f.calls
	f.calls++
	f.mu.Unlock()
	if f.fail[n] {
		return 0, errSweepLink
	}
	return f.Sweepable.Sweep(ctx, limit)
}

// TestSweeperRoundBatches: a round loops while a batch removes its limit, up
// to the cap, and says when it stopped at the cap with records left.
func TestSweeperRoundBatches(t *testing.T) {
	clock := newFakeClock(false)
	st := expiredStore(t, clock, 25)
	var evs []idem.SweepEvent
	sw := idem.NewSweeper(st, idem.WithSweepBatch(10), idem.WithSweepMaxBatches(2), idem.WithSweepClock(clock),
		idem.WithSweepObserver(func(ev idem.SweepEvent) { evs = append(evs, ev) }))
	for _, want := range []idem.SweepEvent{
		{Removed: 20, Batches: 2, More: true},
		{Removed: 5, Batches: 1},
		{Removed: 0, Batches: 1},
	} {
		n, err := sw.Round(t.Context())
		require.NoError(t, err)
		assert.Equal(t, want.Removed, n)
		assert.Equal(t, want, evs[len(evs)-1])
	}
	assert.Zero(t, st.Len())
}

// TestSweeperRunJitter: Run waits the interval moved by at most the jitter,
// the same waits for the same seed, other waits for another seed, and a
// round after each wait.
func TestSweeperRunJitter(t *testing.T) {
	waits := func(seed uint64) []time.Duration {
		clock := &recordingClock{fakeClock: newFakeClock(true)}
		st := expiredStore(t, clock.fakeClock, 3)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rounds := 0
		var removed []int
		sw := idem.NewSweeper(st, idem.WithSweepClock(clock), idem.WithSweepInterval(time.Minute),
			idem.WithSweepJitter(0.25), idem.WithSweepSeed(seed), idem.WithSweepBatch(2),
			idem.WithSweepObserver(func(ev idem.SweepEvent) {
				removed = append(removed, ev.Removed)
				if rounds++; rounds == 20 {
					cancel()
				}
			}))
		sw.Run(ctx)
		assert.Equal(t, 3, removed[0], "the first round removes everything, in two batches")
		assert.Equal(t, make([]int, 19), removed[1:])
		for _, d := range clock.slept {
			assert.GreaterOrEqual(t, d, 45*time.Second)
			assert.LessOrEqual(t, d, 75*time.Second)
		}
		return clock.slept
	}
	a, b, c := waits(1), waits(1), waits(2)
	require.Len(t, a, 21, "20 rounds, each after a wait, and the wait cut short by the end")
	assert.Equal(t, a, b, "same seed, same waits")
	assert.NotEqual(t, a, c, "another seed, other waits")
	distinct := map[time.Duration]bool{}
	for _, d := range a {
		distinct[d] = true
	}
	assert.Greater(t, len(distinct), 10, "the waits are jittered: %v", a)
}

// recordingClock records the durations slept on it.
type recordingClock struct {
	*fakeClock
	mu    sync.Mutex
	slept []time.Duration
}

func (c *recordingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	return c.fakeClock.Sleep(ctx, d)
}

// TestSweeperErrors: a failing Sweep ends its round with the error, told to
// the observer, and Run goes on: the next round removes what is left.
func TestSweeperErrors(t *testing.T) {
	clock := newFakeClock(false)
	st := &flakySweep{Sweepable: expiredStore(t, clock, 7), fail: map[int]bool{1: true}}
	events := make(chan idem.SweepEvent, 10)
	sw := idem.NewSweeper(st, idem.WithSweepBatch(3), idem.WithSweepClock(clock), idem.WithSweepInterval(time.Minute),
		idem.WithSweepJitter(0), idem.WithSweepObserver(func(ev idem.SweepEvent) { events <- ev }))
	stop := sw.Start(t.Context())
	defer stop()

	clock.WaitSleepers(t, 1)
	clock.Advance(time.Minute)
	ev := <-events
	assert.Equal(t, 3, ev.Removed)
	assert.Equal(t, 2, ev.Batches)
	require.ErrorIs(t, ev.Err, errSweepLink)

	clock.WaitSleepers(t, 1)
	clock.Advance(time.Minute)
	ev = <-events
	assert.Equal(t, idem.SweepEvent{Removed: 4, Batches: 2}, ev)

	stop()
	stop() // a second stop is harmless
	clock.Advance(time.Hour)
	assert.Empty(t, events, "no round after stop")
}

// TestSweepersShareTheWork: sweepers running at once on one store (as on
// every replica) remove every expired record once between them.
func TestSweepersShareTheWork(t *testing.T) {
	clock := newFakeClock(false)
	st := expiredStore(t, clock, 500)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := range 4 {
		sw := idem.NewSweeper(st, idem.WithSweepBatch(7), idem.WithSweepSeed(uint64(i)), idem.WithSweepClock(clock))
		wg.Go(func() {
			for {
				n, err := sw.Round(t.Context())
				assert.NoError(t, err)
				mu.Lock()
				total += n
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 500, total)
	assert.Zero(t, st.Len())
}

// TestSweeperInvalidOptions: each invalid option panics with its name.
func TestSweeperInvalidOptions(t *testing.T) {
	st := memstore.New()
	for _, c := range []struct {
		opt  idem.SweepOption
		want string
	}{
		{idem.WithSweepInterval(0), "WithSweepInterval(0s)"},
		{idem.WithSweepJitter(1), "WithSweepJitter(1)"},
		{idem.WithSweepJitter(-0.1), "WithSweepJitter(-0.1)"},
		{idem.WithSweepBatch(0), "WithSweepBatch(0)"},
		{idem.WithSweepMaxBatches(-1), "WithSweepMaxBatches(-1)"},
		{idem.WithSweepClock(nil), "WithSweepClock(nil)"},
		{idem.WithSweepPause(-time.Millisecond), "WithSweepPause(-1ms)"},
		{idem.WithSweepDutyCycle(0), "WithSweepDutyCycle(0)"},
		{idem.WithSweepDutyCycle(-0.5), "WithSweepDutyCycle(-0.5)"},
		{idem.WithSweepDutyCycle(1.01), "WithSweepDutyCycle(1.01)"},
		{idem.WithSweepDutyCycle(math.NaN()), "WithSweepDutyCycle(NaN)"},
		{idem.WithSweepObserver(nil), "WithSweepObserver(nil)"},
	} {
		func() {
			defer func() {
				p := recover()
				require.NotNil(t, p, c.want)
				assert.Contains(t, p, c.want)
			}()
			idem.NewSweeper(st, c.opt)
		}()
	}
	assert.PanicsWithValue(t, "idem: NewSweeper: store is nil", func() { idem.NewSweeper(nil) })
}

// slowSweep is a real store's Sweep that takes, by the fake clock, the
// next of took for each call (the last one again once they run out), and
// counts its calls.
type slowSweep struct {
	idem.Sweepable
	clock *fakeClock
	took  []time.Duration
	mu    sync.Mutex
	calls int
}

func (s *slowSweep) Sweep(ctx context.Context, limit int) (int, error) {
	s.mu.Lock()
	d := s.took[min(s.calls, len(s.took)-1)]
	s.calls++
	s.mu.Unlock()
	n, err := s.Sweepable.Sweep(ctx, limit)
	s.clock.Advance(d)
	return n, err
}

// TestSweeperPacing: between two batches of a round the sweeper rests the
// pause, or b×(1−f)/f after a batch of duration b with duty cycle f if
// longer (DefaultSweepDutyCycle without options); never after the last
// batch of a round, nor with duty cycle 1 and no pause; and the rests make
// the batches take the duty cycle's share of the time.
func TestSweeperPacing(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		opts  []idem.SweepOption
		took  []time.Duration
		rests []time.Duration
	}{
		{"the default duty cycle", nil, []time.Duration{30 * ms}, []time.Duration{570 * ms, 570 * ms, 570 * ms}},
		{"duty cycle 1/4", []idem.SweepOption{idem.WithSweepDutyCycle(0.25)},
			[]time.Duration{30 * ms}, []time.Duration{90 * ms, 90 * ms, 90 * ms}},
		{"each rest from its own batch", []idem.SweepOption{idem.WithSweepDutyCycle(0.5)},
			[]time.Duration{10 * ms, 40 * ms, 20 * ms, 5 * ms}, []time.Duration{10 * ms, 40 * ms, 20 * ms}},
		{"pause", []idem.SweepOption{idem.WithSweepPause(50 * ms)},
			[]time.Duration{0}, []time.Duration{50 * ms, 50 * ms, 50 * ms}},
		{"the longer of pause and duty cycle", []idem.SweepOption{idem.WithSweepPause(50 * ms), idem.WithSweepDutyCycle(0.5)},
			[]time.Duration{10 * ms, 80 * ms, 30 * ms, 60 * ms}, []time.Duration{50 * ms, 80 * ms, 50 * ms}},
		{"duty cycle 1 is no pacing", []idem.SweepOption{idem.WithSweepDutyCycle(1)}, []time.Duration{30 * ms}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := &recordingClock{fakeClock: newFakeClock(true)}
			st := &slowSweep{Sweepable: expiredStore(t, clock.fakeClock, 35), clock: clock.fakeClock, took: c.took}
			var evs []idem.SweepEvent
			opts := append([]idem.SweepOption{idem.WithSweepBatch(10), idem.WithSweepClock(clock),
				idem.WithSweepObserver(func(ev idem.SweepEvent) { evs = append(evs, ev) })}, c.opts...)
			sw := idem.NewSweeper(st, opts...)
			n, err := sw.Round(t.Context())
			require.NoError(t, err)
			assert.Equal(t, 35, n)
			assert.Equal(t, c.rests, clock.slept, "rests between the 4 batches, none after the last")
			var work, rested time.Duration
			for i := range 4 {
				work += c.took[min(i, len(c.took)-1)]
			}
			for _, d := range c.rests {
				rested += d
			}
			require.Len(t, evs, 1)
			assert.Equal(t, idem.SweepEvent{Removed: 35, Batches: 4, Elapsed: work + rested, Rested: rested}, evs[0])
		})
	}
}

// TestSweeperDutyCycleBoundsTheRate: a sweeper far behind (many full
// batches) with duty cycle f spends at most f of each batch-and-rest cycle
// sweeping, so its round takes the batches' time over f, and it stops at
// the batch cap with More set, leaving the rest for the next round.
func TestSweeperDutyCycleBoundsTheRate(t *testing.T) {
	clock := &recordingClock{fakeClock: newFakeClock(true)}
	st := &slowSweep{Sweepable: expiredStore(t, clock.fakeClock, 1000), clock: clock.fakeClock, took: []time.Duration{20 * time.Millisecond}}
	var ev idem.SweepEvent
	sw := idem.NewSweeper(st, idem.WithSweepBatch(10), idem.WithSweepMaxBatches(50), idem.WithSweepDutyCycle(0.2),
		idem.WithSweepClock(clock), idem.WithSweepObserver(func(e idem.SweepEvent) { ev = e }))
	n, err := sw.Round(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 500, n)
	assert.True(t, ev.More)
	assert.Len(t, clock.slept, 49)
	work := 50 * 20 * time.Millisecond
	assert.Equal(t, 49*80*time.Millisecond, ev.Rested)
	assert.Equal(t, work+ev.Rested, ev.Elapsed)
	// f × batch / took = 100 records/s (a little more: no rest after the
	// last batch), where flat out it would be 500.
	assert.InDelta(t, 100, float64(n)/ev.Elapsed.Seconds(), 2)
}

// TestSweeperPacingStopsOnContext: a sweeper resting between batches stops
// at once when its context ends: the round ends with the context's error,
// told to the observer, no batch runs after it, and Run returns.
func TestSweeperPacingStopsOnContext(t *testing.T) {
	clock := newFakeClock(false)
	st := &slowSweep{Sweepable: expiredStore(t, clock, 100), clock: clock, took: []time.Duration{time.Second}}
	events := make(chan idem.SweepEvent, 10)
	sw := idem.NewSweeper(st, idem.WithSweepBatch(10), idem.WithSweepDutyCycle(0.1), idem.WithSweepClock(clock),
		idem.WithSweepInterval(time.Minute), idem.WithSweepJitter(0), idem.WithSweepObserver(func(ev idem.SweepEvent) { events <- ev }))
	stop := sw.Start(t.Context())
	defer stop()

	clock.WaitSleepers(t, 1) // the wait before the first round
	clock.Advance(time.Minute)
	clock.WaitSleepers(t, 1) // the rest after the first batch: 9 s
	clock.Advance(8 * time.Second)
	assert.Empty(t, events, "still resting")
	clock.WaitSleepers(t, 1)
	clock.Advance(time.Second)
	clock.WaitSleepers(t, 1) // the rest after the second batch
	stop()
	ev := <-events
	require.ErrorIs(t, ev.Err, context.Canceled)
	assert.Equal(t, 20, ev.Removed)
	assert.Equal(t, 2, ev.Batches)
	assert.Equal(t, 9*time.Second, ev.Rested, "the rest cut short is not counted")
	st.mu.Lock()
	assert.Equal(t, 2, st.calls, "no batch after the stop")
	st.mu.Unlock()
	assert.Empty(t, events)
}
