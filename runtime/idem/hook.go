package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// LogEventsWithKeys is LogEvents that also logs each event's tenant and key
// text, which may carry personal data.
func LogEventsWithKeys(l *slog.Logger) func(Event) { return logEvents(l, true) }

// CallHook follows each call of Do from its start to its end: its events,
// the run of the method, each store operation and each wait. It is what
// tracing and metrics packages (runtime/idemotel) plug into the executor,
// so that the core imports none of them. Set it with WithCallHook; without
// one, Do pays a single nil check.
type CallHook interface {
	// StartCall is called when Do starts, before m is checked, at the
	// executor's clock time at. It returns the context the call goes on in
	// (one carrying a span, say; the method and the store see it) and the
	// call's observer. It must be safe for concurrent use.
	StartCall(ctx context.Context, m *Method, at time.Time) (context.Context, CallObserver)
}

// CallObserver follows one call of Do (see CallHook). Its methods are called
// from the call's goroutine, except Event and StoreOp for lease renewals,
// which come from the renewal's goroutine while the method runs, and for an
// outcome the executor goes on storing after the caller's context ended
// (ErrOutcomePending), which come from that goroutine, after End.
type CallObserver interface {
	// Event is told each of the call's events, as WithObserver's function is.
	Event(ev Event)
	// Method is called when the method starts, with the context it would
	// run in; it returns the context the method runs in and a function
	// called when the method returns (with its error) or panics (with an
	// error describing the panic).
	Method(ctx context.Context, at time.Time) (context.Context, func(at time.Time, err error))
	// StoreOp is called when the executor starts a store operation: op is
	// "claim", "complete", "release" or "renew", or in transactional mode
	// (TxStore) "claim_tx", "commit" or "rollback". It returns the context
	// the operation runs in and a function called when it returns.
	StoreOp(ctx context.Context, op string, at time.Time) (context.Context, func(at time.Time, err error))
	// Wait is called when a duplicate starts waiting (Method.Wait) for a
	// running call, for at most d before it claims again.
	Wait(at time.Time, d time.Duration)
	// End is called once, when Do returns, with the error it returns (nil
	// for a success, a replayed success included), or, when the method
	// panicked or called runtime.Goexit, an error matching ErrCallAborted.
	End(at time.Time, err error)
}

// ErrCallAborted is what CallObserver.End is told when Do did not return
// because the method panicked or called runtime.Goexit.
var ErrCallAborted = errors.New("idem: the method panicked or called runtime.Goexit")

// WithCallHook sets the executor's CallHook (nil is invalid; a second
// WithCallHook replaces the first).
func WithCallHook(h CallHook) Option {
	return func(e *Executor) {
		if h == nil {
			e.invalid("WithCallHook(nil)")
			return
		}
		if e.hook == nil {
			// Time the store's operations, for the calls that carry an
			// observer in their context.
			hs := hookedStore{Store: e.store, ex: e}
			e.store = hs
			if e.txStore != nil {
				e.txStore = hookedTxStore{hookedStore: hookedStore{Store: e.txStore, ex: e}, tx: e.txStore}
			}
			if e.renewer != nil {
				e.renewer = hookedRenewer{hookedStore: hs, r: e.renewer}
			}
		}
		e.hook = h
	}
}

// hooked runs Do under the executor's CallHook.
func hooked[T any](ctx context.Context, ex *Executor, m *Method, parts *KeyParts, h *Hasher, fn func(context.Context) (T, error)) (T, error) {
	ctx, obs := ex.hook.StartCall(ctx, m, ex.now())
	// The hook's context may carry values of its own: the call's state is
	// read from it. (Whatever it is: comparing it with the caller's would
	// panic for a context of a type that == cannot compare.)
	st := lookup(ctx, fTenant|fInfo|fTxn)
	s := &st
	if obs == nil {
		return do(ctx, s, ex, m, parts, h, fn, nil)
	}
	// The observer, in the context its store operations get.
	ctx = withField(ctx, fObserver, "", obs)
	method := func(ctx context.Context) (T, error) {
		ctx, done := obs.Method(ctx, ex.now())
		returned := false
		defer func() {
			if !returned {
				done(ex.now(), ErrCallAborted)
			}
		}()
		v, err := fn(ctx)
		returned = true
		done(ex.now(), err)
		return v, err
	}
	returned := false
	defer func() {
		if !returned {
			obs.End(ex.now(), ErrCallAborted)
		}
	}()
	v, err := do(ctx, s, ex, m, parts, h, method, obs)
	returned = true
	obs.End(ex.now(), err)
	return v, err
}

// waiting tells the call's observer that it waits for at most d.
func (c *call[T]) waiting(d time.Duration) {
	if c.on != nil {
		c.on.Wait(c.ex.now(), d)
	}
}

// hookedStore tells the CallObserver in a store operation's context about
// the operation.
type hookedStore struct {
	Store
	ex *Executor
}

func (s hookedStore) op(ctx context.Context, op string) (context.Context, func(time.Time, error)) {
	obs := lookup(ctx, fObserver).observer
	if obs == nil {
		return ctx, nil
	}
	return obs.StoreOp(ctx, op, s.ex.now())
}

func (s hookedStore) done(f func(time.Time, error), err error) {
	if f != nil {
		f(s.ex.now(), err)
	}
}

func (s hookedStore) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	ctx, f := s.op(ctx, "claim")
	c, err := s.Store.Claim(ctx, req)
	s.done(f, err)
	return c, err
}

func (s hookedStore) Complete(ctx context.Context, key Key, token Token, out Outcome, ttl time.Duration) error {
	ctx, f := s.op(ctx, "complete")
	err := s.Store.Complete(ctx, key, token, out, ttl)
	s.done(f, err)
	return err
}

func (s hookedStore) Release(ctx context.Context, key Key, token Token) error {
	ctx, f := s.op(ctx, "release")
	err := s.Store.Release(ctx, key, token)
	s.done(f, err)
	return err
}

type hookedRenewer struct {
	hookedStore
	r Renewer
}

func (s hookedRenewer) Renew(ctx context.Context, key Key, token Token, lease time.Duration) error {
	ctx, f := s.op(ctx, "renew")
	err := s.r.Renew(ctx, key, token, lease)
	s.done(f, err)
	return err
}

type hookedTxStore struct {
	hookedStore
	tx TxStore
}

func (s hookedTxStore) ClaimTx(ctx context.Context, req ClaimRequest, wait time.Duration) (Claim, Txn, error) {
	ctx, f := s.op(ctx, "claim_tx")
	c, txn, err := s.tx.ClaimTx(ctx, req, wait)
	s.done(f, err)
	if txn != nil {
		txn = hookedTxn{Txn: txn, s: s.hookedStore}
	}
	return c, txn, err
}

type hookedTxn struct {
	Txn
	s hookedStore
}

func (t hookedTxn) Complete(ctx context.Context, out Outcome, ttl time.Duration, discardWrites bool) error {
	ctx, f := t.s.op(ctx, "commit")
	err := t.Txn.Complete(ctx, out, ttl, discardWrites)
	t.s.done(f, err)
	return err
}

func (t hookedTxn) Release(ctx context.Context) error {
	ctx, f := t.s.op(ctx, "rollback")
	err := t.Txn.Release(ctx)
	t.s.done(f, err)
	return err
}
