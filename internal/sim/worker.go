package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/idemgen/idemgen/internal/sim/simsvc"
	"github.com/idemgen/idemgen/runtime/idem"
)

type workerState uint8

const (
	starting workerState = iota // spawned, waiting for its first baton
	running                     // holds the baton
	parked                      // waits at a yield point
	crashed                     // parked forever: the process died
	ended                       // its call returned (or it left by Goexit)
	killed                      // ended by cleanup
)

type wakeMsg struct {
	err  error // why a wait ended early (the context's error), or nil
	kill bool  // leave by runtime.Goexit: the schedule is over
}

// worker is one attempt of a client: a goroutine that calls the generated
// wrapper, and so idem.Do, the link and the method body.
type worker struct {
	id      int
	w       *world
	cl      *client
	ks      *keyState
	req     simsvc.Request
	ctx     context.Context
	cancel  context.CancelFunc
	wake    chan wakeMsg
	state   workerState
	gen     uint64          // invalidates the wake-up of an earlier wait
	waitOn  context.Context // the context of the current wait (cancellable when Done != nil)
	where   string          // the yield point it is parked at, for the trace
	carrier *carrier        // the goroutine that runs it
	// parent is the worker whose lease this renewal goroutine renews, or
	// whose outcome this keeper goroutine keeps (nil for a worker);
	// renewal is a worker's renewal goroutine, if any.
	parent, renewal *worker
	stopAfter       func() bool // unregisters the wake-up on the renewals' end
	keeper          bool        // the executor's goroutine that keeps parent's outcome after its caller gave up, or sends its release again
	// releaseLost: a Release of this worker did not reach the store or
	// lost its reply (the executor sends it again from a goroutine);
	// releaseDown: one found the store down or in an outage; releaser: the
	// executor's goroutine that sends it again was adopted.
	releaseLost, releaseDown, releaser bool

	token      idem.Token
	tokenSet   bool
	exec       *execution // the method run of this attempt, if any
	claimEpoch int        // the record's life its claim began
	// completeSent: a Complete of this worker left for the store;
	// completeOK: the store accepted one (whether or not the reply came back).
	completeSent, completeOK bool
	completeRefused          bool // a reply to its Complete said ErrLeaseLost
	storedWhenAnswered       bool // completeOK when the store answered its last Complete
	seenEpoch                int  // the record's life its last replay or accepted outcome came from
	faulted                  bool // a request or reply of this worker was lost or cut short
	// linkFaulted: one of its requests or replies was lost, duplicated or
	// arrived after the worker stopped waiting (not a store outage).
	linkFaulted bool
	sawDown     bool // one of its Complete requests found the store down
	cancelled   bool // its client cancelled its context
	fenced      bool // another worker took its lease over

	res     *simsvc.Result
	err     error
	how     string // "returned", "panic", "goexit"
	panicV  any
	replied bool // the answer was checked
}

func (wk *worker) String() string {
	if wk.keeper {
		return wk.parent.String() + ".keeper"
	}
	if wk.parent != nil {
		return wk.parent.String() + ".renewal"
	}
	return fmt.Sprintf("w%d(c%d)", wk.id, wk.cl.id)
}

// renewalStart is how the executor's renewal goroutine announces itself.
type renewalStart struct {
	actor *worker
	ctx   context.Context
	d     time.Duration
}

// owner is the worker whose call an actor (a renewal or a keeper) serves:
// its parent, or the worker itself.
func (wk *worker) owner() *worker {
	if wk.parent != nil {
		return wk.parent
	}
	return wk
}

// startRenewal runs on one of the executor's goroutines at its first Sleep
// (the lease renewal, or the keeper of an outcome): it hands itself to the
// worker on ch (the worker waits for its renewal in body before it touches
// anything, and for its keeper when it returns ErrOutcomePending) and waits
// to be scheduled like any worker.
func (w *world) startRenewal(ch chan *renewalStart, ctx context.Context, d time.Duration) error {
	a := &worker{wake: make(chan wakeMsg, 1)}
	ch <- &renewalStart{actor: a, ctx: ctx, d: d}
	m := <-a.wake
	if m.kill {
		runtime.Goexit()
	}
	return m.err
}

// adoptRenewal makes the announced renewal goroutine an actor of wk, parked
// in its first Sleep. The renewals end when their context does: the
// executor cancels it and then waits for them while it holds the baton, so
// the end wakes the renewal goroutine directly, outside the event queue.
func (w *world) adoptRenewal(wk *worker, rs *renewalStart) {
	a := rs.actor
	a.id, a.w, a.cl, a.ks, a.parent = wk.id, w, wk.cl, wk.ks, wk
	a.token, a.tokenSet = wk.token, true
	wk.renewal = a
	a.gen++
	g := a.gen
	a.waitOn, a.where, a.state = rs.ctx, "sleep "+rs.d.String(), parked
	w.after(rs.d, func() { w.resume(a, g, nil) })
	a.stopAfter = context.AfterFunc(rs.ctx, func() {
		// The worker holds the baton and waits for the renewals to end.
		a.gen++
		a.state = ended
		a.wake <- wakeMsg{err: rs.ctx.Err()}
	})
	w.tracef("%s starts, first renewal in %v", a, rs.d)
}

// adoptReleaser adopts the goroutine the executor started to send a lost
// release of wk again (see link.Release), before wk yields: it announced
// itself at its first Sleep, as the executor started it (clock.Go). If the
// executor started none, there is nothing to adopt: the checker judges the
// claim left behind (answered).
func (wk *worker) adoptReleaser() {
	if wk.parent == nil && wk.releaseLost {
		if rs := wk.w.takeSpawned(false); rs != nil {
			wk.w.adoptKeeper(wk, rs, false)
			wk.releaser = true
		}
		wk.releaseLost = false
	}
}

// adoptKeeper makes the announced keeper goroutine an actor of wk, parked
// in its first Sleep: the goroutine that keeps wk's outcome (pending: wk's
// caller was told idem.ErrOutcomePending), or the one that sends wk's
// release again. It ends by cancelling its own context, as its last act,
// while it holds the baton: that hands the baton back.
func (w *world) adoptKeeper(wk *worker, rs *renewalStart, pending bool) {
	a := rs.actor
	a.id, a.w, a.cl, a.ks, a.parent, a.keeper = wk.id, w, wk.cl, wk.ks, wk, true
	a.token, a.tokenSet = wk.token, true
	w.keeperActors = append(w.keeperActors, a)
	a.gen++
	g := a.gen
	a.waitOn, a.where, a.state = rs.ctx, "sleep "+rs.d.String(), parked
	w.after(rs.d, func() { w.resume(a, g, nil) })
	context.AfterFunc(rs.ctx, func() {
		if a.state != killed {
			a.state = ended
		}
		w.back <- struct{}{}
	})
	if pending {
		w.stats.Pending++
	}
	w.tracef("%s starts, first attempt in %v", a, rs.d)
}

// wait parks the worker for d of virtual time, or until ctx is done when ctx
// can be cancelled; it returns ctx's error in that case.
func (wk *worker) wait(ctx context.Context, d time.Duration, where string) error {
	if wk.state == killed {
		return errKilled
	}
	wk.adoptReleaser()
	if err := ctx.Err(); err != nil {
		return err
	}
	w := wk.w
	wk.gen++
	g := wk.gen
	w.after(d, func() { w.resume(wk, g, nil) })
	wk.waitOn = ctx
	wk.where = where
	return wk.park()
}

// park hands the baton back to the scheduler and waits for it.
func (wk *worker) park() error {
	wk.state = parked
	wk.w.back <- struct{}{}
	m := <-wk.wake
	if m.kill {
		runtime.Goexit()
	}
	return m.err
}

var errKilled = errors.New("sim: the schedule is over")

// resume gives the baton to wk if it still waits for the wake-up of its
// wait number g. It may crash the worker instead: the worker then stays
// parked until cleanup, and never returns.
func (w *world) resume(wk *worker, g uint64, err error) {
	if wk.gen != g || wk.state != parked {
		return
	}
	if p := wk.parent; p != nil && p.state == crashed {
		wk.state = crashed // the process died: its renewals with it
		return
	}
	if wk.parent == nil && !wk.cl.probe && err == nil && w.chance(w.p.crash) {
		wk.state = crashed
		w.stats.Crashes++
		w.tracef("%s CRASHES while at %s", wk, wk.where)
		return
	}
	w.hand(wk, wakeMsg{err: err})
}

// hand gives the baton to wk and waits until it parks or ends.
func (w *world) hand(wk *worker, m wakeMsg) {
	from := wk.where // read before wk runs
	wk.state = running
	w.cur = wk
	wk.wake <- m
	if !w.baton(wk.String() + ", resumed from " + from + ",") {
		return
	}
	if wk.keeper {
		if wk.state == ended {
			w.tracef("%s ends", wk)
		}
		w.cur = nil
		return
	}
	if p := wk.parent; p != nil {
		if wk.state == ended {
			// The renewals lost the lease and end without yielding again:
			// they cancel the method's context (the worker waits on it in
			// body) before they return.
			if !w.await(p.waitOn.Done(), wk.String()+" (its end does not cancel the method's context)") {
				return
			}
			if p.state == parked {
				p.gen++
				g := p.gen
				err := p.waitOn.Err()
				w.after(0, func() { w.resume(p, g, err) })
			}
		}
		w.cur = nil
		return
	}
	w.cur = nil
	if wk.state == ended {
		if wk.how != "goexit" {
			// main returned: its goroutine waits for the next worker.
			w.runner.idle = append(w.runner.idle, wk.carrier)
		}
		w.answered(wk)
	}
}

// cancelCtx cancels the context of wk's call and wakes it if it waits on it.
func (w *world) cancelCtx(wk *worker) {
	if wk.ctx.Err() != nil || wk.state == ended || wk.state == killed {
		return
	}
	wk.cancel()
	wk.cancelled = true
	w.stats.Cancellations++
	w.tracef("c%d cancels the context of %s", wk.cl.id, wk)
	if wk.state == parked && wk.waitOn != nil && wk.waitOn.Err() != nil {
		wk.gen++
		g := wk.gen
		err := wk.waitOn.Err()
		w.after(0, func() { w.resume(wk, g, err) })
	}
}

// spawn starts a worker's goroutine, parked until its first baton.
func (w *world) spawn(c *client) *worker {
	wk := &worker{id: len(w.workers), w: w, cl: c, ks: c.ks, wake: make(chan wakeMsg, 1), seenEpoch: -1}
	wk.req = simsvc.Request{Key: c.ks.name, Payload: c.payload}
	wk.ctx, wk.cancel = context.WithCancel(w.ctx)
	w.workers = append(w.workers, wk)
	wk.carrier = w.runner.carrier()
	wk.carrier.jobs <- wk
	return wk
}

func (wk *worker) main() {
	returned := false
	defer func() {
		if wk.state != killed {
			wk.state = ended
			if !returned && wk.how == "" {
				wk.how = "goexit"
			}
		}
		wk.cancel()
		wk.w.back <- struct{}{}
	}()
	if m := <-wk.wake; m.kill {
		return
	}
	wk.call()
	returned = true
}

func (wk *worker) call() {
	defer func() {
		if p := recover(); p != nil {
			wk.how, wk.panicV = "panic", p
		}
		// Also when the method left by runtime.Goexit: the executor's
		// deferred release may have been lost, and sent again by a
		// goroutine of its own.
		wk.adoptReleaser()
	}()
	svc := wk.w.svc
	switch wk.ks.method {
	case "Pay":
		wk.res, wk.err = svc.Pay(wk.ctx, wk.req)
	case "Brief":
		wk.res, wk.err = svc.Brief(wk.ctx, wk.req)
	default:
		wk.res, wk.err = svc.Await(wk.ctx, wk.req)
	}
	if errors.Is(wk.err, idem.ErrOutcomePending) {
		// The executor left a goroutine keeping the outcome: it announced
		// itself at its first Sleep, as the executor started it.
		if rs := wk.w.takeSpawned(false); rs != nil {
			wk.w.adoptKeeper(wk, rs, true)
		} else {
			wk.w.violate("%s: %s was told idem.ErrOutcomePending, but the executor started nothing that keeps its outcome", wk.ks.name, wk)
		}
	}
	wk.how = "returned"
}

// Outcome kinds of one method run.
type kind uint8

const (
	kSucceed kind = iota
	kFinal
	kTransient
	kPanic
	kGoexit
	kNaN
	kindCount
)

func (k kind) String() string {
	switch k {
	case kSucceed:
		return "succeeds"
	case kFinal:
		return "fails finally"
	case kTransient:
		return "fails transiently"
	case kPanic:
		return "panics"
	case kGoexit:
		return "calls runtime.Goexit"
	case kNaN:
		return "returns an unencodable result (NaN)"
	}
	return "kind?"
}

func (k kind) decided() bool { return k == kSucceed || k == kFinal || k == kNaN }

// execution is one run of the method body.
type execution struct {
	id       int64
	wk       *worker
	epoch    int
	kind     kind
	ended    bool
	endedAt  time.Time
	decided  bool
	fenced   bool // another claim took its key over while its outcome was not stored
	excused  bool // its outcome was lost to the documented lease-stall case
	finalMsg string
}

// body is Service.Body: the method itself. It runs for a while (a wait the
// caller's cancellation can cut short), then does what the schedule drew.
func (w *world) body(ctx context.Context, method string, req simsvc.Request) (*simsvc.Result, error) {
	wk := w.cur
	if rs := w.takeSpawned(true); rs != nil {
		// The executor started the lease renewals before it called the
		// method: their goroutine announced itself as it started.
		w.adoptRenewal(wk, rs)
	}
	w.execs++
	e := &execution{id: w.execs, wk: wk, epoch: wk.claimEpoch}
	wk.exec = e
	w.stats.Executions++
	w.checkExecution(e)
	k := kSucceed
	d := w.between(time.Millisecond, 200*time.Millisecond)
	if wk.cl.probe {
		d = time.Millisecond
	} else {
		k = w.p.kind(w.rng)
		if w.chance(w.p.stall) {
			d = w.between(lease/2, 3*lease)
		}
	}
	w.tracef("%s runs %s (exec #%d, payload %d, token %s), for %v", wk, method, e.id, req.Payload, w.tok(wk.token), d)
	if e.id == 1 && w.opts.stick != stickNone {
		w.stuck(wk)
	}
	if err := wk.wait(ctx, d, fmt.Sprintf("%s exec #%d", method, e.id)); err != nil {
		e.ended = true
		w.tracef("%s exec #%d sees its context done: %v", wk, e.id, err)
		return nil, err
	}
	e.ended, e.endedAt = true, w.now
	e.kind = k
	w.tracef("%s exec #%d %s", wk, e.id, k)
	if k.decided() {
		w.decide(e)
		if !wk.cl.probe && w.p.outage > 0 && w.orng.Float64() < w.p.outage {
			d := time.Duration(w.orng.Int64N(int64(lease/2))) + lease/20
			// The kind of outage goes in turn (no draw: the schedules of
			// the seeds stay what they were).
			kind := outageErrs[w.stats.Outages%len(outageErrs)]
			if until := w.now.Add(d); until.After(w.downTil) {
				w.downTil, w.downErr = until, kind
			}
			w.stats.Outages++
			w.tracef("STORE DOWN for %v as exec #%d returns, answering: %v", d, e.id, kind)
		}
	}
	res := &simsvc.Result{Key: req.Key, Payload: req.Payload, Exec: e.id}
	switch k {
	case kFinal:
		// A sentinel of the annotation's final= list, or idem.Final.
		err := fmt.Errorf("exec %d payload %d: %w", e.id, req.Payload, simsvc.ErrRejected)
		if e.id%2 == 0 {
			err = idem.Final(fmt.Errorf("exec %d payload %d: declined", e.id, req.Payload))
		}
		e.finalMsg = err.Error()
		w.finals[e.finalMsg] = e
		return nil, err
	case kTransient:
		return nil, fmt.Errorf("exec %d: downstream timeout", e.id)
	case kPanic:
		panic(fmt.Sprintf("exec %d panics", e.id))
	case kGoexit:
		runtime.Goexit()
	case kNaN:
		res.X = math.NaN()
	}
	return res, nil
}

// stuck makes wk's method run never end (Options.stick), for tests.
func (w *world) stuck(wk *worker) {
	switch w.opts.stick {
	case stickStrand:
		wk.waitOn, wk.where = context.Background(), "a wait nobody ends"
		_ = wk.park()
	case stickLoop:
		for {
			_ = wk.wait(context.Background(), time.Second, "a wait it repeats forever")
		}
	case stickBlock:
		select {} // a real block: only the hang guard (stuckAfter) ends the schedule
	}
}
