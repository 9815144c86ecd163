package idem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Sweepable is a store that removes expired records in bounded steps. Every
// store of this module implements it with one meaning: Sweep removes at most
// limit expired records and returns how many it removed, so a caller that
// sweeps in bounded steps calls it again while it returns limit; with limit
// <= 0 it removes every expired record (runtime/idemtest checks both).
type Sweepable interface {
	Sweep(ctx context.Context, limit int) (int, error)
}

// Defaults of a Sweeper.
const (
	// DefaultSweepInterval is the mean time between rounds.
	DefaultSweepInterval = time.Minute
	// DefaultSweepJitter is how far a wait may move from the interval, as
	// a fraction of it, either way.
	DefaultSweepJitter = 0.2
	// DefaultSweepBatch is the limit of each Sweep call.
	DefaultSweepBatch = 1000
	// DefaultSweepMaxBatches caps the Sweep calls of one round.
	DefaultSweepMaxBatches = 100
	// DefaultSweepDutyCycle is the share of a round's time its batches may
	// take: after a batch of duration b the sweeper rests b×(1−f)/f
	// before the next, so that a sweeper that fell behind catches up at a
	// bounded rate instead of saturating the store's disk: on pgstore
	// it kept first-call p99 within 1.05–1.41× while a tenth of 10⁶
	// records expired, against 4.3–5.9× flat out
	// (docs/decisions/sweep-pacing.md).
	DefaultSweepDutyCycle = 0.05
)

// Sweeper removes a store's expired records on an interval (Run, Start):
// each round calls the store's Sweep with a bounded batch, again while a
// batch removes its limit, up to a cap of batches per round, so that one
// round never holds the store for long; between two batches it rests in
// proportion to the batch's own duration (WithSweepDutyCycle, default
// DefaultSweepDutyCycle) or a fixed pause (WithSweepPause), so that a
// sweeper that fell behind catches up at a bounded rate instead of taking
// the store's disk from the calls beside it. The wait before each round is the
// interval moved at random by up to the jitter either way (from the
// sweeper's own seeded source), so that replicas started together do not
// sweep in step.
//
// Running a Sweeper on every replica at once is safe: the stores' Sweep
// removes only expired records, skips rows another sweeper holds (pgstore's
// SKIP LOCKED) and answers a record another sweeper removed first as not
// there; the work is shared, not repeated.
type Sweeper struct {
	store      Sweepable
	interval   time.Duration
	jitter     float64
	batch      int
	maxBatches int
	pause      time.Duration
	duty       float64
	clock      Clock
	observe    func(SweepEvent)
	seed       uint64
	seeded     bool
	bad        string

	mu  sync.Mutex // guards rnd
	rnd *rand.Rand
}

// SweepEvent reports one round of a Sweeper.
type SweepEvent struct {
	// Removed is how many expired records the round removed.
	Removed int
	// Batches is how many times the round called Sweep.
	Batches int
	// More is true when the round stopped at the batch cap while its last
	// batch removed its limit: expired records are likely left for the
	// next round (raise the batch, the cap or the frequency if it stays
	// true).
	More bool
	// Elapsed is the round's duration by the sweeper's clock, its rests
	// between batches included.
	Elapsed time.Duration
	// Rested is how long the round rested between its batches
	// (WithSweepPause, WithSweepDutyCycle).
	Rested time.Duration
	// Err is the error that ended the round early, if any; the sweeper
	// goes on with the next round.
	Err error
}

// SweepOption configures a Sweeper. An invalid option makes NewSweeper
// panic with a message that names it.
type SweepOption func(*Sweeper)

// WithSweepInterval sets the mean time between rounds (default
// DefaultSweepInterval); it must be positive.
func WithSweepInterval(d time.Duration) SweepOption {
	return func(s *Sweeper) {
		if d <= 0 {
			s.invalid("WithSweepInterval(%v): interval must be > 0", d)
			return
		}
		s.interval = d
	}
}

// WithSweepJitter sets how far each wait may move from the interval, as a
// fraction of it in [0, 1) (default DefaultSweepJitter: ±20%).
func WithSweepJitter(f float64) SweepOption {
	return func(s *Sweeper) {
		if !(f >= 0 && f < 1) {
			s.invalid("WithSweepJitter(%v): jitter must be in [0, 1)", f)
			return
		}
		s.jitter = f
	}
}

// WithSweepBatch sets the limit of each Sweep call (default
// DefaultSweepBatch); it must be positive.
func WithSweepBatch(n int) SweepOption {
	return func(s *Sweeper) {
		if n <= 0 {
			s.invalid("WithSweepBatch(%d): batch must be > 0", n)
			return
		}
		s.batch = n
	}
}

// WithSweepMaxBatches caps the Sweep calls of one round (default
// DefaultSweepMaxBatches); it must be positive.
func WithSweepMaxBatches(n int) SweepOption {
	return func(s *Sweeper) {
		if n <= 0 {
			s.invalid("WithSweepMaxBatches(%d): cap must be > 0", n)
			return
		}
		s.maxBatches = n
	}
}

// WithSweepPause sets the least rest between two batches of a round
// (default 0); it must not be negative. The rest is the longer of it and
// the one WithSweepDutyCycle asks.
func WithSweepPause(d time.Duration) SweepOption {
	return func(s *Sweeper) {
		if d < 0 {
			s.invalid("WithSweepPause(%v): pause must be >= 0", d)
			return
		}
		s.pause = d
	}
}

// WithSweepDutyCycle sets the share f in (0, 1] of a round's time that
// its batches may take (default DefaultSweepDutyCycle): after a batch that
// took b by the sweeper's clock, the sweeper rests b×(1−f)/f before the
// next one. A batch that is slow because the store is busy thus makes the
// next rest longer, and a round removes at most f of what the store could
// remove flat out. With f = 1 batches follow each other at once.
func WithSweepDutyCycle(f float64) SweepOption {
	return func(s *Sweeper) {
		if !(f > 0 && f <= 1) {
			s.invalid("WithSweepDutyCycle(%v): duty cycle must be in (0, 1]", f)
			return
		}
		s.duty = f
	}
}

// WithSweepClock sets the clock that paces the rounds and measures them
// (default SystemClock).
func WithSweepClock(c Clock) SweepOption {
	return func(s *Sweeper) {
		if c == nil {
			s.invalid("WithSweepClock(nil)")
			return
		}
		s.clock = c
	}
}

// WithSweepSeed seeds the sweeper's jitter, for reproducible waits (by
// default each Sweeper draws its own seed).
func WithSweepSeed(seed uint64) SweepOption {
	return func(s *Sweeper) { s.seed, s.seeded = seed, true }
}

// WithSweepObserver sets a function told about every round, synchronously
// from the sweeper's goroutine (runtime/idemotel turns it into metrics).
func WithSweepObserver(f func(SweepEvent)) SweepOption {
	return func(s *Sweeper) {
		if f == nil {
			s.invalid("WithSweepObserver(nil)")
			return
		}
		s.observe = f
	}
}

func (s *Sweeper) invalid(format string, args ...any) {
	if s.bad == "" {
		s.bad = "idem: " + fmt.Sprintf(format, args...)
	}
}

// NewSweeper returns a Sweeper of store. It panics if store is nil or an
// option is invalid, naming it.
func NewSweeper(store Sweepable, opts ...SweepOption) *Sweeper {
	if store == nil {
		panic("idem: NewSweeper: store is nil")
	}
	s := &Sweeper{
		store:      store,
		interval:   DefaultSweepInterval,
		jitter:     DefaultSweepJitter,
		batch:      DefaultSweepBatch,
		maxBatches: DefaultSweepMaxBatches,
		duty:       DefaultSweepDutyCycle,
		clock:      SystemClock{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.bad != "" {
		panic(s.bad)
	}
	if !s.seeded {
		s.seed = rand.Uint64()
	}
	s.rnd = rand.New(rand.NewPCG(s.seed, s.seed^0x9e3779b97f4a7c15))
	return s
}

// Round runs one round now: Sweep with the batch limit, again while a call
// removes its limit, at most the cap of calls, resting between calls as
// WithSweepPause and WithSweepDutyCycle ask. It returns how many records
// it removed and the error that ended it (ctx's, when ctx ends during a
// rest), and tells the observer.
func (s *Sweeper) Round(ctx context.Context) (removed int, err error) {
	start := s.clock.Now()
	ev := SweepEvent{}
	for ev.Batches < s.maxBatches {
		began := s.clock.Now()
		n, err := s.store.Sweep(ctx, s.batch)
		ev.Batches++
		ev.Removed += max(n, 0)
		if err != nil {
			ev.Err = fmt.Errorf("idem: sweep: %w", err)
			break
		}
		if n < s.batch {
			break
		}
		ev.More = ev.Batches == s.maxBatches
		if ev.More {
			break
		}
		if rest := s.rest(s.clock.Now().Sub(began)); rest > 0 {
			if err := s.clock.Sleep(ctx, rest); err != nil {
				ev.Err = fmt.Errorf("idem: sweep: %w", err)
				break
			}
			ev.Rested += rest
		}
	}
	ev.Elapsed = s.clock.Now().Sub(start)
	if s.observe != nil {
		s.observe(ev)
	}
	return ev.Removed, ev.Err
}

// rest returns the rest after a batch that took took: the pause, or the
// rest the duty cycle asks if longer.
func (s *Sweeper) rest(took time.Duration) time.Duration {
	r := s.pause
	if s.duty < 1 && took > 0 {
		r = max(r, time.Duration(float64(took)*(1-s.duty)/s.duty))
	}
	return r
}

// next returns the wait before the next round: the interval moved by up to
// the jitter either way.
func (s *Sweeper) next() time.Duration {
	s.mu.Lock()
	u := s.rnd.Float64()
	s.mu.Unlock()
	d := time.Duration(float64(s.interval) * (1 + s.jitter*(2*u-1)))
	return max(d, time.Nanosecond)
}

// Run sweeps until ctx is done: it waits a jittered interval, runs a round,
// and again. A round's error is reported to the observer and the next
// round goes on (a store that is down now may be up then). Run returns
// when ctx is done, without cutting a round short other than through the
// store's own handling of ctx.
func (s *Sweeper) Run(ctx context.Context) {
	for s.clock.Sleep(ctx, s.next()) == nil {
		_, _ = s.Round(ctx) // reported to the observer
	}
}

// Start runs Run in a goroutine of its own and returns the function that
// stops it: stop cancels the sweeper's context and waits for Run to
// return. It may be called more than once.
func (s *Sweeper) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
