// Package sim is the deterministic simulator of idemgen's runtime: the real
// executor (idem.Do, through the generated wrapper of simsvc) and the real
// store (memstore) run in a simulated world driven by one seed.
//
// The world has virtual time (the executor's idem.Clock and the store's
// clock read it; leases and TTLs lapse when the simulator says), a link
// between executor and store that delays, drops and duplicates requests and
// replies (a reply may be lost after the store applied the operation),
// workers that crash at any yield point and never return or return late
// after a takeover, callers that retry with backoff, give up or cancel, store
// crashes (a durable store keeps its records, a losing one restarts empty),
// and methods that succeed, fail finally, fail transiently, panic, call
// runtime.Goexit or return a result JSON cannot encode.
//
// The executor's own goroutines are actors too: the lease renewal, and the
// goroutine that goes on storing an outcome after its caller gave up
// (idem.ErrOutcomePending); each announces itself at its first Clock.Sleep,
// and runs only when scheduled. They die with their worker's process only
// while it runs the method (a keeper never crashes).
//
// Determinism with real goroutines: every worker is a goroutine, but only
// one goroutine runs at a time. A worker runs until it reaches a yield point
// (a request or reply on the link, the clock's Sleep, the method body's run
// time), where it schedules its wake-up as an event and hands the baton back
// to the scheduler, which runs the next event in (time, sequence) order.
// Every random choice comes from the schedule's seeded generator, so a seed
// replays the same schedule exactly; Result.Report prints the seed and the
// trace of the steps.
//
// The checker sees what the store accepted (the link knows, even when the
// reply is lost) and what every method body did. Within one life of a
// record (it ends when the record expires or a losing store forgets it), it
// checks at every step:
//
//   - at most one execution per key: no method body starts after another
//     one decided an outcome (success, final error, unencodable result) —
//     except the documented lease-stall case, counted apart (Stats.Stalls):
//     the deciding worker lost its lease (it stalled, crashed, or its
//     Complete was lost or late) before its outcome was stored; a
//     Complete that failed only because the store was down (unreachable,
//     or answering an error that can pass), and
//     back with time to spare before the lease lapsed, is no excuse (the
//     executor keeps the outcome through an outage shorter than the
//     lease, Outages);
//   - the store keeps its contract: a claim is granted only over no record
//     or a lapsed lease of the same payload, never over a stored outcome;
//     a fenced zombie never completes (nor releases, nor renews);
//   - every replay equals the first outcome stored, and a stored outcome
//     never changes;
//   - every answer is true: a caller told success (or a final error) got
//     the outcome the record holds, produced for its own payload (a
//     different payload is never replayed); the documented exception, when
//     no Complete reply came back or the executor stored its not-stored
//     substitute, is counted apart (Stats.Unstored); a caller told
//     ErrLeaseLost really lost its outcome;
//   - a call that ends (even by runtime.Goexit) leaves no claim behind,
//     unless the link lost one of its requests;
//
// and at the end, after every lease lapsed, a fault-free probe of each key
// must not find it PROCESSING, and must replay the outcome a durable store
// acknowledged (it must not execute the key again).
//
// A schedule that cannot end is a failure too, reported with its seed: its
// event queue drains with a goroutine still parked, its virtual time passes
// maxVirtual or it runs maxEvents events, or a goroutine holds the baton
// without yielding for a minute of real time (a hang guard). The
// executor's own goroutines are started through the simulator's clock
// (clock.Go), so that the simulator never waits for one that was not.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
	"github.com/idemgen/idemgen/internal/sim/simsvc"
	"github.com/idemgen/idemgen/runtime/idem"
)

// lease is the lease of simsvc's methods (lease=1s in their annotations).
const lease = time.Second

// StoreKind says what a store crash does to the records.
type StoreKind uint8

const (
	// Durable keeps every record it acknowledged across a crash (the same
	// memstore survives it), as PostgreSQL does.
	Durable StoreKind = iota + 1
	// Losing restarts empty after a crash (a fresh memstore), as Redis
	// without persistence does.
	Losing
)

func (k StoreKind) String() string {
	switch k {
	case Durable:
		return "durable"
	case Losing:
		return "losing"
	}
	return "unknown"
}

// ParseStoreKind reads "durable" or "losing".
func ParseStoreKind(s string) (StoreKind, error) {
	switch s {
	case "durable":
		return Durable, nil
	case "losing":
		return Losing, nil
	}
	return 0, fmt.Errorf("sim: unknown store kind %q (durable or losing)", s)
}

// Faults selects the fault classes a schedule may draw.
type Faults uint32

const (
	// LinkFaults: requests and replies are dropped or duplicated, and
	// delays can exceed the lease.
	LinkFaults Faults = 1 << iota
	// WorkerCrashes: a worker crashes at a yield point and never returns.
	WorkerCrashes
	// Stalls: a method runs past its lease (its worker becomes a zombie).
	Stalls
	// Cancels: callers cancel their context and give up on an attempt.
	Cancels
	// StoreCrashes: the store crashes (durable or losing, by StoreKind).
	StoreCrashes
	// MethodFaults: methods fail finally or transiently and panic.
	MethodFaults
	// Goexit: methods call runtime.Goexit.
	Goexit
	// Unencodable: methods return a result JSON cannot encode (NaN).
	Unencodable
	// PayloadReuse: some callers reuse a key with another payload.
	PayloadReuse
	// Outages: the store cannot be reached, or answers with an error that
	// can pass (a read-only database, a full disk: see outageErrs), for a
	// while (shorter than the lease) right after a method decided its
	// outcome, as during a database restart or a failover: the executor
	// must keep the outcome and store it when the store is back.
	Outages

	// AllFaults is every fault class.
	AllFaults = LinkFaults | WorkerCrashes | Stalls | Cancels | StoreCrashes | MethodFaults | Goexit | Unencodable | PayloadReuse | Outages
)

// Renewal says whether the executor renews leases (idem.WithRenewal).
type Renewal uint8

const (
	// RenewBySeed turns renewal on in a quarter of the schedules, chosen by
	// the seed (the default).
	RenewBySeed Renewal = iota
	// RenewOff never renews.
	RenewOff
	// RenewOn always renews.
	RenewOn
)

// Options configure a schedule.
type Options struct {
	Store     StoreKind   // default Durable
	Faults    Faults      // default AllFaults
	Mutations mutant.Flag // known mistakes to switch on
	Renewal   Renewal     // default RenewBySeed
	Trace     bool        // keep a readable trace of every step

	stick stick // tests only: make the schedule stuck (see stick)
	// stuckAfter, when set, replaces defaultStuckAfter (tests only: the
	// blocked schedule's test shortens it).
	stuckAfter time.Duration
}

// stick makes a schedule stuck on purpose, for the tests that show every
// stuck schedule is reported: the first method run (exec #1) then never
// ends, in one of three ways.
type stick uint8

const (
	stickNone   stick = iota
	stickStrand       // it parks with no wake-up scheduled: nothing is left to run
	stickLoop         // it waits a second of virtual time, forever
	stickBlock        // it blocks on a channel, never yielding the baton
)

// renews reports whether the schedule of seed renews leases; by seed, it
// is drawn apart from the schedule's generator, so that it changes nothing
// else.
func (o Options) renews(seed uint64) bool {
	switch o.Renewal {
	case RenewOn:
		return true
	case RenewOff:
		return false
	}
	return (seed*0x9e3779b97f4a7c15)>>62 == 0 // a quarter of the seeds
}

// params are the fault probabilities of one schedule, drawn from its seed,
// so that some schedules are calm and some are storms.
type params struct {
	dropRequest, dropReply, duplicate float64
	maxDelay, timeout                 time.Duration
	crash, stall, cancel              float64
	storeCrashes                      int
	outage                            float64            // chance of an outage after a decided execution
	kinds                             [kindCount]float64 // cumulative weights of the outcome kinds
}

func (p *params) kind(r *rand.Rand) kind {
	x := r.Float64() * p.kinds[kindCount-1]
	for k := range kindCount {
		if x < p.kinds[k] {
			return k
		}
	}
	return kSucceed
}

func drawParams(r *rand.Rand, f Faults) params {
	var p params
	p.maxDelay = time.Duration(1+r.IntN(50)) * time.Millisecond
	p.timeout = 500 * time.Millisecond
	if f&LinkFaults != 0 {
		p.dropRequest = r.Float64() * 0.08
		p.dropReply = r.Float64() * 0.15
		p.duplicate = r.Float64() * 0.1
		if r.IntN(4) == 0 {
			p.maxDelay = time.Duration(100+r.IntN(1400)) * time.Millisecond
		}
		p.timeout = time.Duration(100+r.IntN(1500)) * time.Millisecond
	}
	if f&WorkerCrashes != 0 {
		p.crash = r.Float64() * 0.03
	}
	if f&Stalls != 0 {
		p.stall = r.Float64() * 0.3
	}
	if f&Cancels != 0 {
		p.cancel = r.Float64() * 0.3
	}
	if f&StoreCrashes != 0 && r.IntN(3) == 0 {
		p.storeCrashes = 1 + r.IntN(2)
	}
	w := [kindCount]float64{kSucceed: 6}
	if f&MethodFaults != 0 {
		w[kFinal], w[kTransient], w[kPanic] = 2, 2, 0.5
	}
	if f&Goexit != 0 {
		w[kGoexit] = 0.5
	}
	if f&Unencodable != 0 {
		w[kNaN] = 0.5
	}
	sum := 0.0
	for k := range kindCount {
		sum += w[k] * (0.2 + r.Float64()) // each schedule its own mix
		p.kinds[k] = sum
	}
	return p
}

// client is a caller of one key: it calls, and retries with backoff after
// an error that allows it, a crash or a timeout, until it has an answer or
// runs out of attempts.
type client struct {
	id      int
	ks      *keyState
	payload int64
	left    int
	backoff time.Duration
	timeout time.Duration
	cur     *worker
	probe   bool // the fault-free call at the end of a schedule
}

// Run runs the schedule of seed and returns what happened. It is safe to
// call from several goroutines at once: schedules share nothing.
func Run(seed uint64, opts Options) *Result {
	r := NewRunner()
	defer r.Close()
	return r.Run(seed, opts)
}

// Runner runs schedules one after another, reusing the goroutines of the
// workers that returned (a fresh goroutine's stack grows again through the
// executor on every call: a third of a schedule's time). A Runner is not
// safe for concurrent use; Close ends its idle goroutines.
type Runner struct {
	idle []*carrier
}

// carrier is a goroutine that runs workers one after another; a worker that
// leaves by runtime.Goexit (its method's, or the cleanup's kill) ends it.
type carrier struct {
	jobs chan *worker
}

// NewRunner returns a Runner with no goroutine yet.
func NewRunner() *Runner { return &Runner{} }

// Close ends the Runner's idle goroutines.
func (r *Runner) Close() {
	for _, c := range r.idle {
		close(c.jobs)
	}
	r.idle = nil
}

func (r *Runner) carrier() *carrier {
	if n := len(r.idle); n > 0 {
		c := r.idle[n-1]
		r.idle = r.idle[:n-1]
		return c
	}
	c := &carrier{jobs: make(chan *worker, 1)}
	go func() {
		for wk := range c.jobs {
			wk.main()
		}
	}()
	return c
}

// Run runs the schedule of seed, as the package's Run does.
func (r *Runner) Run(seed uint64, opts Options) *Result {
	if opts.Store == 0 {
		opts.Store = Durable
	}
	if opts.Faults == 0 {
		opts.Faults = AllFaults
	}
	w := &world{
		seed:     seed,
		opts:     opts,
		runner:   r,
		rng:      rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		now:      epoch0(),
		back:     make(chan struct{}),
		tokens:   make(map[idem.Token]*worker),
		finals:   make(map[string]*execution),
		renewals: make(chan *renewalStart),
		keepers:  make(chan *renewalStart),
		decoded:  make(map[string]outcome),
	}
	w.ctx = context.Background()
	if opts.Mutations != 0 {
		w.ctx = mutant.With(w.ctx, opts.Mutations)
	}
	w.p = drawParams(w.rng, opts.Faults)
	// Outages are drawn by a generator of their own, so that a schedule
	// without one is the schedule the seed had before they existed.
	w.orng = rand.New(rand.NewPCG(seed, 0x07a6e))
	if opts.Faults&Outages != 0 && w.orng.IntN(2) == 0 {
		w.p.outage = 0.2 + 0.6*w.orng.Float64()
	}
	w.mem = w.newStore()
	w.renew = opts.renews(seed)
	exOpts := []idem.Option{idem.WithClock(clock{w}), idem.WithRenewal(w.renew), idem.SingleTenant()}
	if opts.Trace {
		exOpts = append(exOpts, idem.WithObserver(func(ev idem.Event) {
			who := "?"
			if w.cur != nil {
				who = w.cur.String()
			}
			if ev.Err != nil {
				w.tracef("%s executor event %s: %v", who, ev.Kind, ev.Err)
			} else {
				w.tracef("%s executor event %s", who, ev.Kind)
			}
		}))
	}
	w.svc = simsvc.NewIdempotentService(&simsvc.Service{Body: w.body}, idem.NewExecutor(link{w}, exOpts...))
	w.setup()
	w.run()
	return &Result{Seed: seed, Store: opts.Store, Mutations: opts.Mutations, Violations: w.violations, Trace: w.trace, Stats: w.stats}
}

// setup draws the keys, the clients and the store crashes of the schedule.
func (w *world) setup() {
	methods := [...]struct {
		name string
		ttl  time.Duration
	}{{"Pay", time.Hour}, {"Brief", 3 * time.Second}, {"Await", time.Hour}}
	nkeys := 1 + w.rng.IntN(3)
	for i := range nkeys {
		m := methods[w.rng.IntN(len(methods))]
		ks := &keyState{name: fmt.Sprintf("k%d", i), method: m.name, ttl: m.ttl}
		w.keys = append(w.keys, ks)
		nclients := 1 + w.rng.IntN(4)
		for range nclients {
			c := &client{
				id:      len(w.clients),
				ks:      ks,
				left:    1 + w.rng.IntN(5),
				backoff: w.between(10*time.Millisecond, 300*time.Millisecond),
				timeout: w.between(300*time.Millisecond, 4*time.Second),
			}
			if w.opts.Faults&PayloadReuse != 0 && w.chance(0.15) {
				c.payload = 1
			}
			w.clients = append(w.clients, c)
			start := w.between(0, 2*time.Second)
			w.tracef("c%d calls %s(%s, payload %d) at %v, %d attempts", c.id, m.name, ks.name, c.payload, start, c.left)
			w.after(start, func() { w.attempt(c) })
		}
	}
	for range w.p.storeCrashes {
		w.after(w.between(0, 5*time.Second), w.crashStore)
	}
}

// attempt starts one call of c.
func (w *world) attempt(c *client) {
	c.left--
	w.stats.Calls++
	wk := w.spawn(c)
	c.cur = wk
	w.tracef("c%d attempt %s starts", c.id, wk)
	if !c.probe {
		w.after(c.timeout, func() {
			if c.cur != wk || wk.state == ended {
				return
			}
			w.tracef("c%d times out waiting for %s", c.id, wk)
			c.cur = nil
			if w.chance(0.5) {
				w.cancelCtx(wk)
			}
			w.retry(c)
		})
		if w.chance(w.p.cancel) {
			w.after(w.between(0, c.timeout), func() { w.cancelCtx(wk) })
		}
	}
	w.hand(wk, wakeMsg{})
}

// retry schedules c's next attempt after its backoff, if it has any left.
func (w *world) retry(c *client) {
	if c.left <= 0 {
		w.tracef("c%d gives up", c.id)
		return
	}
	d := c.backoff
	c.backoff *= 2
	w.after(d, func() { w.attempt(c) })
}

// clientDone lets the client of wk decide what to do with its answer.
func (w *world) clientDone(wk *worker) {
	c := wk.cl
	if c.cur != wk || c.probe {
		if c.probe && wk.how == "returned" && wk.err != nil {
			w.probeFailed(wk)
		}
		return
	}
	c.cur = nil
	if wk.how == "returned" && (wk.err == nil || final(wk.err)) {
		return
	}
	if wk.cancelled && w.chance(0.5) {
		w.tracef("c%d gave up (cancelled)", c.id)
		return
	}
	w.retry(c)
}

func final(err error) bool {
	return err != nil && (isFinal(err) || isMismatch(err))
}

// probeFailed judges the error of a fault-free call at the end.
func (w *world) probeFailed(wk *worker) {
	switch {
	case isInProgress(wk.err):
		w.violate("%s stays PROCESSING after every worker stopped and every lease lapsed: %v", wk.ks.name, wk.err)
	case isFinal(wk.err), isMismatch(wk.err):
	default:
		w.violate("%s: the fault-free probe failed: %v", wk.ks.name, wk.err)
	}
}
