package sim

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Transport errors of the simulated link, as a network client reports them
// (the executor knows them as a store it could not reach).
var (
	errRequestLost = fmt.Errorf("sim: request lost: %w", syscall.ETIMEDOUT)
	errReplyLost   = fmt.Errorf("sim: reply lost: %w", syscall.ETIMEDOUT)
	errStoreDown   = fmt.Errorf("sim: store unavailable: %w", syscall.ECONNREFUSED)
)

// outageErrs are the answers of a store in an outage after a decided
// execution (Outages), taken in turn: one it cannot be reached by, and
// two it answers with while it cannot write, as a demoted primary or a
// full disk does. The read-only answer carries only its SQLSTATE (the
// executor knows it by its kind); the full disk is marked by the store
// with idem.StoreOutage, as every store marks its driver's errors. None
// is a refusal: each passes when the outage ends.
var outageErrs = []error{
	errStoreDown,
	fmt.Errorf("sim: %w", sqlStateError{"25006", "cannot execute UPDATE in a read-only transaction"}),
	idem.StoreOutage(errors.New("sim: database or disk is full")),
}

// sqlStateError is a database's answer with its SQLSTATE, as pgx's.
type sqlStateError struct{ code, msg string }

func (e sqlStateError) Error() string    { return e.msg + " (SQLSTATE " + e.code + ")" }
func (e sqlStateError) SQLState() string { return e.code }

// isDown reports whether err is the answer of a store that is down.
func isDown(err error) bool {
	for _, d := range outageErrs {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// link is the idem.Store the executor sees: the path to the real store
// through a simulated network that delays, drops and duplicates requests
// and replies. Every request and reply is a yield point; the store applies
// an operation at the instant its request arrives.
type link struct{ w *world }

// Local marks the link as a LocalStore so that the executor puts no
// wall-clock deadline (context.WithTimeout) on its store calls after the
// method ran: such a deadline runs in real time, outside the simulator's
// control. The link's own timeouts stand for it.
func (l link) Local() bool { return true }

var _ idem.LocalStore = link{}

// op is one store operation: apply runs it on the current store and
// records what the checker needs.
type op struct {
	name  string
	apply func(ctx context.Context) error
}

// call carries op over the link for the current worker.
func (l link) call(ctx context.Context, o op) error {
	w := l.w
	wk := w.cur
	if wk == nil {
		panic("sim: store called outside a worker")
	}
	if wk.state == killed {
		return errKilled
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := &w.p
	perfect := wk.cl.probe
	sctx := context.WithoutCancel(ctx) // what the store sees: the values, not the caller's cancellation
	if !perfect && w.chance(p.dropRequest) {
		w.stats.LinkFaults++
		wk.faulted, wk.owner().linkFaulted = true, true
		w.tracef("%s %s: request LOST", wk, o.name)
		if err := wk.wait(ctx, w.between(50*time.Millisecond, p.timeout), o.name+" (request lost)"); err != nil {
			return err
		}
		return fmt.Errorf("%s: %w", o.name, errRequestLost)
	}
	d := w.between(0, p.maxDelay)
	arrive := w.now.Add(d)
	if err := wk.wait(ctx, d, o.name+" request"); err != nil {
		// The caller gave up while its request was in flight: the request
		// still arrives and is applied, with nobody waiting for the reply.
		wk.faulted, wk.owner().linkFaulted = true, true
		w.at(arrive, func() { w.orphan(sctx, wk, o, "arrives after its caller gave up") })
		return err
	}
	if w.now.Before(w.downTil) {
		wk.faulted = true
		if o.name == "complete" {
			wk.owner().sawDown = true
		}
		w.tracef("%s %s: store down", wk, o.name)
		return fmt.Errorf("%s: %w", o.name, w.downErr)
	}
	err := o.apply(sctx)
	w.tracef("%s %s applied: %s", wk, o.name, errText(err))
	if !perfect && w.chance(p.duplicate) {
		w.stats.LinkFaults++
		wk.faulted, wk.owner().linkFaulted = true, true
		w.after(w.between(0, 2*p.maxDelay), func() { w.orphan(sctx, wk, o, "DUPLICATE") })
	}
	if !perfect && w.chance(p.dropReply) {
		w.stats.LinkFaults++
		wk.faulted, wk.owner().linkFaulted = true, true
		w.tracef("%s %s: reply LOST", wk, o.name)
		if werr := wk.wait(ctx, w.between(50*time.Millisecond, p.timeout), o.name+" (reply lost)"); werr != nil {
			return werr
		}
		return fmt.Errorf("%s: %w", o.name, errReplyLost)
	}
	if werr := wk.wait(ctx, w.between(0, p.maxDelay), o.name+" reply"); werr != nil {
		wk.faulted, wk.owner().linkFaulted = true, true
		return werr
	}
	return err
}

// orphan applies a request nobody waits for (a duplicate, or one whose
// caller gave up), on the scheduler's goroutine.
func (w *world) orphan(ctx context.Context, wk *worker, o op, why string) {
	if w.now.Before(w.downTil) {
		w.tracef("%s %s (%s): store down", wk, o.name, why)
		return
	}
	err := o.apply(ctx)
	w.tracef("%s %s (%s) applied: %s", wk, o.name, why, errText(err))
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Claim implements idem.Store.
func (l link) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	w := l.w
	wk := w.cur
	if !wk.tokenSet {
		wk.token, wk.tokenSet = req.Token, true
		w.tokens[req.Token] = wk
	}
	var c idem.Claim
	err := l.call(ctx, op{name: "claim", apply: func(sctx context.Context) error {
		got, err := w.mem.Claim(sctx, req)
		if err == nil {
			w.onClaim(wk, req, got)
		}
		if w.cur == wk {
			c = got
		}
		return err
	}})
	return c, err
}

// Complete implements idem.Store, for a worker or the keeper of its
// outcome.
func (l link) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	w := l.w
	a := w.cur
	wk := a.owner()
	wk.completeSent = true
	err := l.call(ctx, op{name: "complete", apply: func(sctx context.Context) error {
		err := w.mem.Complete(sctx, key, token, out, ttl)
		if err == nil {
			if a.keeper && !wk.completeOK {
				w.stats.Kept++
			}
			w.onComplete(wk, out, ttl)
		}
		if w.cur == a {
			// Whether the store holds the token's outcome as it answers
			// the executor's own request (a stale duplicate may still
			// store it later, unknown to the executor).
			wk.storedWhenAnswered = err == nil
		}
		return err
	}})
	if errors.Is(err, idem.ErrLeaseLost) {
		wk.completeRefused = true
	}
	return err
}

// Release implements idem.Store.
func (l link) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	w := l.w
	wk := w.cur
	err := l.call(ctx, op{name: "release", apply: func(sctx context.Context) error {
		err := w.mem.Release(sctx, key, token)
		if err == nil {
			w.onRelease(wk)
		}
		return err
	}})
	if wk.parent == nil && (errors.Is(err, errRequestLost) || errors.Is(err, errReplyLost) || isDown(err)) {
		wk.releaseLost = true // the executor will send it again
		wk.releaseDown = wk.releaseDown || isDown(err)
	}
	return err
}

// Renew implements idem.Renewer, for the executor's renewal goroutine, and
// for a worker (or its keeper) that keeps an outcome the store could not
// take yet.
func (l link) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	w := l.w
	a := w.cur
	err := l.call(ctx, op{name: "renew", apply: func(sctx context.Context) error {
		err := w.mem.Renew(sctx, key, token, lease)
		if err == nil {
			w.onRenew(a.owner(), lease)
		}
		return err
	}})
	if errors.Is(err, idem.ErrLeaseLost) && a.parent != nil && !a.keeper && a.state == running {
		// The renewals end now, without another yield: give the baton
		// back (the scheduler waits until they cancel the method's
		// context).
		a.stopAfter()
		a.state = ended
		w.stats.RenewalsLost++
		w.back <- struct{}{}
	}
	return err
}

var _ idem.Renewer = link{}

// crashStore crashes the store: a durable one keeps its records (the same
// memstore survives), a losing one restarts empty (Redis without
// persistence). It is down for a while either way.
func (w *world) crashStore() {
	w.stats.StoreCrashes++
	down := w.between(0, 300*time.Millisecond)
	w.downTil, w.downErr = w.now.Add(down), errStoreDown
	if w.opts.Store == Losing {
		w.mem = w.newStore()
		for _, ks := range w.keys {
			ks.lost()
		}
		w.tracef("STORE CRASHES and restarts EMPTY, down for %v", down)
		return
	}
	w.tracef("STORE CRASHES and restarts with its records, down for %v", down)
}
