package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
	"github.com/idemgen/idemgen/internal/sim/simsvc"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// epoch0 returns the virtual instant every schedule starts at.
func epoch0() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// maxEvents bounds one schedule: a schedule that has not ended after this
// many events is reported as a livelock.
const maxEvents = 200_000

// world is one schedule: virtual time, the event queue, the store, the
// executor, the clients and workers, and the checker's view of every key.
// Only one goroutine runs at a time: the scheduler (Run's goroutine) or the
// worker it resumed, which hands the baton back when it parks or ends.
type world struct {
	seed     uint64
	opts     Options
	runner   *Runner
	renew    bool               // the executor renews leases
	renewals chan *renewalStart // a renewal goroutine announces itself
	rng      *rand.Rand
	orng     *rand.Rand         // draws the outages (Outages), apart from rng
	keepers  chan *renewalStart // the executor's goroutine that keeps an outcome announces itself
	p        params
	now      time.Time
	seq      uint64
	q        eventQueue
	events   int
	cur      *worker       // the worker holding the baton; nil: the scheduler
	back     chan struct{} // a worker hands the baton back
	mem      *memstore.Store
	downTil  time.Time // the store refuses requests until then
	downErr  error     // with this answer (see outageErrs)
	svc      *simsvc.IdempotentService
	ctx      context.Context // the mutations of the schedule

	keys    []*keyState
	clients []*client
	workers []*worker
	// keeperActors are the executor's goroutines that keep an outcome
	// after its caller gave up (ended by cleanup if still parked).
	keeperActors []*worker
	tokens       map[idem.Token]*worker
	execs        int64
	finals       map[string]*execution // final error messages, by text
	decoded      map[string]outcome    // stored result bodies already decoded

	trace      []string
	violations []string
	stats      Stats
}

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// at schedules fn, to run on the scheduler's goroutine at t (never before
// now). Events at the same instant run in the order they were scheduled.
func (w *world) at(t time.Time, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	w.seq++
	heap.Push(&w.q, &event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) { w.at(w.now.Add(d), fn) }

// chance reports true with probability p.
func (w *world) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

// between returns a duration drawn uniformly from [lo, hi].
func (w *world) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

func (w *world) tracef(format string, args ...any) {
	if !w.opts.Trace {
		return
	}
	w.trace = append(w.trace, fmt.Sprintf("%9.3fs  ", w.now.Sub(epoch0()).Seconds())+fmt.Sprintf(format, args...))
}

// violate records a broken invariant; the schedule stops at the first.
func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.violations = append(w.violations, fmt.Sprintf("at %.3fs: %s", w.now.Sub(epoch0()).Seconds(), msg))
	if w.opts.Trace {
		w.trace = append(w.trace, fmt.Sprintf("%9.3fs  VIOLATION: %s", w.now.Sub(epoch0()).Seconds(), msg))
	}
}

func (w *world) newStore() *memstore.Store {
	return memstore.New(memstore.WithClock(func() time.Time { return w.now }))
}

// clock is the executor's idem.Clock: Now is the virtual instant, and Sleep
// parks the calling worker until the simulator wakes it.
type clock struct{ w *world }

func (c clock) Now() time.Time { return c.w.now }

func (c clock) Sleep(ctx context.Context, d time.Duration) error {
	w := c.w
	wk := w.cur
	if wk == nil {
		panic("sim: Clock.Sleep called outside a worker")
	}
	if _, inCall := idem.KeyFrom(ctx); wk.parent == nil && inCall {
		if wk.releaseLost {
			// The first wait of the goroutine that sends the worker's lost
			// release again: the worker adopts it when its call returns.
			return w.startRenewal(w.keepers, ctx, d)
		}
		if w.renew && wk.renewal == nil {
			// The first wait of the lease renewal the executor started in
			// a goroutine of its own, while the worker that holds the
			// baton is about to run the method: announce it and wait to
			// be scheduled.
			return w.startRenewal(w.renewals, ctx, d)
		}
		// The first wait of the goroutine that keeps the worker's outcome
		// after its caller gave up (the worker's own waits carry no key;
		// its renewals are adopted before the method runs): the worker
		// returns idem.ErrOutcomePending and adopts it.
		return w.startRenewal(w.keepers, ctx, d)
	}
	return wk.wait(ctx, d, "sleep "+d.String())
}

// run executes the schedule until nothing is left to happen, then checks
// the end state and releases every parked goroutine.
func (w *world) run() {
	defer w.cleanup()
	for w.q.Len() > 0 && len(w.violations) == 0 {
		w.events++
		if w.events > maxEvents {
			w.violate("the schedule did not end after %d events (livelock)", maxEvents)
			return
		}
		e := heap.Pop(&w.q).(*event)
		w.now = e.at
		e.fn()
	}
	if len(w.violations) == 0 {
		w.finish()
	}
}

// finish runs after every client is done: it waits out every lease, then
// probes each key with a fault-free call, which must not find the key
// PROCESSING, must replay a stored outcome (a durable store loses none) and
// must not execute a key whose decided outcome lives.
func (w *world) finish() {
	w.now = w.now.Add(2 * lease)
	w.tracef("all clients are done; waiting out the leases; probing every key")
	for _, ks := range w.keys {
		c := &client{id: len(w.clients), ks: ks, payload: ks.probePayload(), left: 1, probe: true}
		w.clients = append(w.clients, c)
		w.attempt(c)
	}
	for w.q.Len() > 0 && len(w.violations) == 0 {
		w.events++
		if w.events > maxEvents {
			w.violate("the probes did not end after %d events (livelock)", maxEvents)
			return
		}
		e := heap.Pop(&w.q).(*event)
		w.now = e.at
		e.fn()
	}
}

// cleanup ends every goroutine still parked (crashed workers, and all of
// them when the schedule stopped at a violation): each is woken with a kill
// and leaves through runtime.Goexit, so nothing outlives the schedule.
func (w *world) cleanup() {
	for _, wk := range append(w.workers, w.keeperActors...) {
		if wk.state == parked || wk.state == crashed {
			wk.state = killed
			w.cur = wk
			wk.wake <- wakeMsg{kill: true}
			<-w.back
			w.cur = nil
		}
	}
}

// Stats counts what a schedule did.
type Stats struct {
	Calls      int // attempts started by clients
	Executions int // method bodies entered
	// Stalls counts executions of a key after an earlier one that decided
	// but lost its lease before its outcome was stored (it stalled or
	// crashed after its side effect, or its Complete failed): the
	// documented lease-mode limit, counted apart and never a violation.
	Stalls int
	// LateStarts counts executions whose lease had lapsed and been taken
	// over before the method started (a late claim reply; a retried claim
	// of the same token answered without a fresh lease): counted apart like
	// Stalls.
	LateStarts int
	// Unstored counts callers told the method's result although it could
	// not be stored (every Complete attempt failed on the link).
	Unstored int
	// Outages counts the outages drawn after a decided execution
	// (Outages); Pending counts callers told idem.ErrOutcomePending (they
	// gave up while the executor kept their outcome), Kept the outcomes
	// the executor's background goroutine stored after that.
	Outages, Pending, Kept int
	Crashes                int // workers that crashed (never returned)
	StoreCrashes           int
	LinkFaults             int // requests or replies dropped or duplicated
	Cancellations          int
	Renewals               int // leases the executor's renewals extended
	RenewalsLost           int // renewals that found the lease lost and cancelled the method
}

func (s *Stats) add(o Stats) {
	s.Calls += o.Calls
	s.Executions += o.Executions
	s.Stalls += o.Stalls
	s.LateStarts += o.LateStarts
	s.Unstored += o.Unstored
	s.Outages += o.Outages
	s.Pending += o.Pending
	s.Kept += o.Kept
	s.Crashes += o.Crashes
	s.StoreCrashes += o.StoreCrashes
	s.LinkFaults += o.LinkFaults
	s.Cancellations += o.Cancellations
	s.Renewals += o.Renewals
	s.RenewalsLost += o.RenewalsLost
}

func (s Stats) String() string {
	return fmt.Sprintf("calls=%d executions=%d stalls=%d late-starts=%d unstored=%d worker-crashes=%d store-crashes=%d outages=%d pending=%d kept=%d link-faults=%d cancels=%d renewals=%d renewals-lost=%d",
		s.Calls, s.Executions, s.Stalls, s.LateStarts, s.Unstored, s.Crashes, s.StoreCrashes, s.Outages, s.Pending, s.Kept, s.LinkFaults, s.Cancellations, s.Renewals, s.RenewalsLost)
}

// Result is the outcome of one schedule.
type Result struct {
	Seed       uint64
	Store      StoreKind
	Mutations  mutant.Flag
	Violations []string
	// Trace is the readable list of steps (with Options.Trace).
	Trace []string
	Stats Stats
}

// OK reports whether every invariant held.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Report returns the seed, the violations and the trace, for a failure
// message.
func (r *Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (store %s, mutations %s): %s\n", r.Seed, r.Store, r.Mutations, r.Stats)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  violation %s\n", v)
	}
	if len(r.Trace) > 0 {
		b.WriteString("  trace:\n")
		for _, l := range r.Trace {
			b.WriteString("    ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "  replay: go run ./internal/sim/cmd/sim -seed %d -store %s -v", r.Seed, r.Store)
	if r.Mutations != 0 {
		fmt.Fprintf(&b, " -mutations %s", r.Mutations)
	}
	return b.String()
}
