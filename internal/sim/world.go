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

// maxVirtual bounds one schedule's virtual time: every client is done
// within a minute of it (at most 5 attempts, timeouts of at most 4 s,
// backoffs from at most 300 ms), so a schedule whose clock passes it keeps
// something waiting or retrying that never ends: it is reported as stuck.
const maxVirtual = 10 * time.Minute

// stuckAfter is the hang guard of one hand-over of the baton, in real time:
// a worker or an executor goroutine that holds the baton for that long has
// blocked on something the simulator does not schedule (a channel, a lock,
// a real timer). The schedule is then reported as stuck, naming its seed,
// instead of hanging the run. It is far above any real hand-over (micro-
// seconds); it decides no verdict a schedule can reach otherwise.
// Options.stuckAfter overrides it.
const defaultStuckAfter = time.Minute

// stuckAfter is the schedule's hang guard (see defaultStuckAfter).
func (w *world) stuckAfter() time.Duration {
	if w.opts.stuckAfter > 0 {
		return w.opts.stuckAfter
	}
	return defaultStuckAfter
}

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

	// spawned are the executor's goroutines started (clock.Go) that
	// announced themselves and wait to be adopted by the worker that
	// started them (a renewal, a keeper, a releaser).
	spawned []spawned
	guard   *time.Timer // the hang guard of a hand-over (stuckAfter)
	// hung: a hand-over of the baton never came back (stuckAfter); the
	// schedule stops, and its goroutines are left as they are.
	hung bool

	trace      []string
	violations []string
	stats      Stats
}

// spawned is an executor goroutine that announced itself at its first
// Sleep: on w.renewals (renewal) or on w.keepers.
type spawned struct {
	renewal bool
	rs      *renewalStart
}

// takeSpawned returns the announced goroutine of the kind (renewal, or a
// keeper or releaser) that the current worker started, or nil when the
// executor started none: the simulator never waits for one that was not
// started (see clock.Go).
func (w *world) takeSpawned(renewal bool) *renewalStart {
	for i, sp := range w.spawned {
		if sp.renewal == renewal {
			w.spawned = append(w.spawned[:i], w.spawned[i+1:]...)
			return sp.rs
		}
	}
	return nil
}

// baton waits until the goroutine that holds the baton hands it back, for
// at most stuckAfter() of real time (a hang guard): then the schedule is
// stuck, reported as such, and false is returned.
func (w *world) baton(who string) bool {
	return w.await(w.back, who)
}

// await waits for ch to deliver or close, under the hang guard (see baton).
func (w *world) await(ch <-chan struct{}, who string) bool {
	if w.guard == nil {
		w.guard = time.NewTimer(w.stuckAfter())
	} else {
		w.guard.Reset(w.stuckAfter())
	}
	select {
	case <-ch:
		w.guard.Stop()
		return true
	case <-w.guard.C:
		w.hung = true
		w.violate("stuck: %s held the baton for %v of real time without yielding (it waits for something the simulator does not schedule)", who, w.stuckAfter())
		return false
	}
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

// Go starts one of the executor's own goroutines (runtime/idem starts them
// through a Clock's Go: the lease renewal, the keeper of an outcome, a
// Release sent again) for the worker holding the baton, and waits until it
// announces itself at its first Sleep (startRenewal), or ends without one.
// The worker adopts it later from w.spawned; so the simulator knows, as
// the executor starts a goroutine, that there is one to adopt, and never
// waits for one that the executor (or a mutation of it) did not start.
func (c clock) Go(fn func()) {
	w := c.w
	if w.cur == nil {
		panic("sim: Clock.Go called outside a worker")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case rs := <-w.renewals:
		w.spawned = append(w.spawned, spawned{renewal: true, rs: rs})
	case rs := <-w.keepers:
		w.spawned = append(w.spawned, spawned{rs: rs})
	case <-done:
	}
}

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
	if !w.drain("the schedule") {
		return
	}
	w.finish()
}

// drain runs the queued events until none is left, and reports whether
// the schedule went on without a violation. A schedule that has not ended
// after maxEvents events or maxVirtual of virtual time, or that ends with a
// goroutine still parked (waiting for a wake-up nothing is left to give),
// is stuck: a violation naming what waits.
func (w *world) drain(what string) bool {
	for w.q.Len() > 0 && len(w.violations) == 0 {
		w.events++
		if w.events > maxEvents {
			w.violate("stuck: %s did not end after %d events (livelock)", what, maxEvents)
			return false
		}
		e := heap.Pop(&w.q).(*event)
		if e.at.Sub(epoch0()) > maxVirtual {
			w.violate("stuck: %s did not end within %v of virtual time (livelock)", what, maxVirtual)
			return false
		}
		w.now = e.at
		e.fn()
	}
	if len(w.violations) > 0 {
		return false
	}
	for _, a := range w.actors() {
		if a.state == parked {
			w.violate("stuck: %s ended with %s parked at %s, and nothing left to wake it", what, a, a.where)
			return false
		}
	}
	return true
}

// actors returns every worker and every executor goroutine they adopted.
func (w *world) actors() []*worker {
	as := make([]*worker, 0, len(w.workers)+len(w.keeperActors))
	for _, wk := range w.workers {
		as = append(as, wk)
		if wk.renewal != nil {
			as = append(as, wk.renewal)
		}
	}
	return append(as, w.keeperActors...)
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
	w.drain("the probes")
}

// cleanup ends every goroutine still parked (crashed workers, and all of
// them when the schedule stopped at a violation): each is woken with a kill
// and leaves through runtime.Goexit, so nothing outlives the schedule.
//
// After a hand-over that never came back (w.hung), the goroutine holding
// the baton cannot be told apart from one handing it back: the goroutines
// are left as they are (the schedule failed; its Runner keeps none of them).
func (w *world) cleanup() {
	if w.guard != nil {
		w.guard.Stop()
	}
	if w.hung {
		return
	}
	for _, sp := range w.spawned {
		sp.rs.actor.wake <- wakeMsg{kill: true} // started, never adopted: it leaves at once
	}
	w.spawned = nil
	for _, wk := range append(w.workers, w.keeperActors...) {
		if wk.state == parked || wk.state == crashed {
			wk.state = killed
			w.cur = wk
			wk.wake <- wakeMsg{kill: true}
			if !w.baton(wk.String() + " (killed at the end)") {
				return
			}
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
