package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
)

// Do runs fn at most once per key: it claims the key built from parts (scoped
// by the executor's tenant and m.Op), runs fn, stores the outcome and returns
// what fn returned. A retry with the same key and fingerprint gets the stored
// outcome instead of a second run; with another fingerprint it gets
// ErrPayloadMismatch; while the first call runs, ErrInProgress (or, with
// m.Wait, the outcome once it is stored).
//
// A final error (Final, or a sentinel in m.Final) is stored and replayed.
// Every other error, a panic (re-raised) or a cancelled context releases the
// key, so the next retry runs fn again. Generated wrappers call Do; it is
// exported for hand-written callers too.
func Do[T any](ctx context.Context, ex *Executor, m *Method, parts *KeyParts, h *Hasher, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	var start time.Time
	if ex.observe != nil {
		start = ex.now()
	}
	key, err := parts.Key(ex.tenant(ctx), m.Op)
	if err != nil {
		return zero, err
	}
	fp, err := h.Sum()
	if err != nil {
		return zero, err
	}
	if m.TTL <= 0 {
		return zero, fmt.Errorf("idem: %s: method has no TTL", m.Op)
	}
	lease := m.Lease
	if lease <= 0 {
		lease = ex.lease
	}
	lease = min(lease, m.TTL)
	req := ClaimRequest{Key: key, Fingerprint: fp, Token: ex.token(), Lease: lease, TTL: m.TTL}
	c := call[T]{ex: ex, m: m, key: key, fp: fp, start: start}

	if ex.txStore != nil {
		claim, txn, err := ex.txStore.ClaimTx(ctx, req, m.Wait)
		if err != nil {
			return zero, c.storeError("claim", err)
		}
		if !claim.Claimed {
			v, err, _ := c.answer(claim.Record, false)
			return v, err
		}
		return runTx(ctx, &c, claim, txn, fn)
	}

	var waited *waiter
	for {
		claim, err := ex.store.Claim(ctx, req)
		if err != nil {
			return zero, c.storeError("claim", err)
		}
		if claim.Claimed {
			return run(ctx, &c, claim, req.Token, fn)
		}
		if m.Wait > 0 && waited == nil {
			waited = &waiter{deadline: ex.now().Add(m.Wait), clock: ex.clock}
		}
		v, err, again := c.answer(claim.Record, waited.more())
		if !again {
			return v, err
		}
		if err := waited.sleep(ctx, claim.Record.LeaseLeft); err != nil {
			return zero, fmt.Errorf("idem: waiting for %s: %w", key.Text, err)
		}
	}
}

// call carries what one Do needs across its helpers.
type call[T any] struct {
	ex    *Executor
	m     *Method
	key   Key
	fp    Fingerprint
	start time.Time
}

func (c *call[T]) emit(kind EventKind, err error) {
	if c.ex.observe == nil {
		return
	}
	c.ex.observe(Event{Kind: kind, Key: c.key, Elapsed: c.ex.now().Sub(c.start), Err: err})
}

func (c *call[T]) storeError(what string, err error) error {
	err = fmt.Errorf("idem: %s %s: %w", what, c.key.Text, err)
	c.emit(EventStoreError, err)
	return err
}

// answer turns a record that blocked the claim into the caller's result.
// again is true when the caller should wait and claim again.
func (c *call[T]) answer(rec Record, wait bool) (v T, err error, again bool) {
	if rec.Fingerprint != c.fp {
		c.emit(EventConflict, nil)
		return v, fmt.Errorf("%w (key %s)", ErrPayloadMismatch, c.key.Text), false
	}
	switch rec.Status {
	case StatusSucceeded:
		if err := c.ex.codec.Unmarshal(rec.Outcome.Body, &v); err != nil {
			return v, c.storeError("decode stored result of", err), false
		}
		c.emit(EventReplayed, nil)
		return v, nil, false
	case StatusFailedFinal:
		c.emit(EventReplayed, nil)
		return v, c.replayedError(rec.Outcome), false
	default:
		if wait {
			return v, nil, true
		}
		c.emit(EventInProgress, nil)
		return v, &InProgressError{Key: c.key, RetryAfter: rec.LeaseLeft}, false
	}
}

func (c *call[T]) replayedError(out Outcome) error {
	e := &ReplayedError{Code: out.ErrCode, Message: out.ErrMessage}
	for _, f := range c.m.Final {
		if f.Name == out.ErrCode {
			e.sentinel = f.Err
			break
		}
	}
	return e
}

// outcome classifies fn's result: the outcome to store, or ok=false when
// the error is transient and the key must be released.
func (c *call[T]) outcome(v T, err error) (out Outcome, ok bool, encErr error) {
	if err == nil {
		body, encErr := c.ex.codec.Marshal(v)
		if encErr != nil {
			return out, false, fmt.Errorf("idem: encode result of %s: %w", c.m.Op, encErr)
		}
		return Outcome{Status: StatusSucceeded, Body: body}, true, nil
	}
	for _, f := range c.m.Final {
		if errors.Is(err, f.Err) {
			return Outcome{Status: StatusFailedFinal, ErrCode: f.Name, ErrMessage: err.Error()}, true, nil
		}
	}
	if errors.Is(err, ErrFinal) {
		return Outcome{Status: StatusFailedFinal, ErrMessage: err.Error()}, true, nil
	}
	return out, false, nil
}

// detached returns a context for store calls after fn ran: not cancelled
// with the caller's, bounded by the executor's store timeout (a LocalStore
// does no I/O and needs no deadline).
func (c *call[T]) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.ex.local {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), c.ex.timeout)
}

func (c *call[T]) claimedEvent(claim Claim) {
	if claim.TakenOver {
		c.emit(EventTakenOver, nil)
	} else {
		c.emit(EventClaimed, nil)
	}
}

// run executes fn under a committed claim and stores or releases.
func run[T any](ctx context.Context, c *call[T], claim Claim, token Token, fn func(context.Context) (T, error)) (v T, err error) {
	c.claimedEvent(claim)
	released := false
	defer func() {
		if p := recover(); p != nil {
			if !released {
				c.release(ctx, token, fmt.Errorf("panic: %v", p))
			}
			panic(p)
		}
	}()
	v, err = fn(withRecordKey(ctx, c.key))
	out, store, encErr := c.outcome(v, err)
	if store && out.Status == StatusFailedFinal && mutant.On(ctx, mutant.ReleaseAfterFinal) {
		store = false // a known mistake, switched on only by the simulator's tests
	}
	if !store {
		released = true
		cause := err
		if encErr != nil {
			cause = encErr
		}
		c.release(ctx, token, cause)
		if encErr != nil {
			// The method ran and succeeded, but its result cannot be stored;
			// the caller still gets it. The observer was told.
			c.emit(EventStoreError, encErr)
		}
		return v, err
	}
	released = true // from here on, a panic is not ours to handle
	if cerr := c.complete(ctx, token, out); cerr != nil {
		if errors.Is(cerr, ErrLeaseLost) {
			var zero T
			return zero, cerr
		}
		// The method ran; the outcome could not be stored after retries.
		// The caller gets the method's result; a retry after the lease
		// lapses would run it again, which the observer reports.
	}
	return v, err
}

func (c *call[T]) release(ctx context.Context, token Token, cause error) {
	dctx, cancel := c.detached(ctx)
	defer cancel()
	if err := c.ex.store.Release(dctx, c.key, token); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			c.emit(EventLeaseLost, err)
			return
		}
		c.emit(EventStoreError, fmt.Errorf("idem: release %s: %w", c.key.Text, err))
		return
	}
	c.emit(EventReleased, cause)
}

func (c *call[T]) complete(ctx context.Context, token Token, out Outcome) error {
	dctx, cancel := c.detached(ctx)
	defer cancel()
	backoff := 10 * time.Millisecond
	var err error
	for attempt := 1; ; attempt++ {
		err = c.ex.store.Complete(dctx, c.key, token, out, c.m.TTL)
		if err == nil {
			c.emit(EventCompleted, nil)
			return nil
		}
		if mutant.On(dctx, mutant.LostCompleteReplyAsLeaseLost) {
			err = ErrLeaseLost // a known mistake, switched on only by the simulator's tests
		}
		if errors.Is(err, ErrLeaseLost) {
			err = fmt.Errorf("idem: complete %s: %w", c.key.Text, err)
			c.emit(EventLeaseLost, err)
			return err
		}
		if attempt >= c.ex.attempts || dctx.Err() != nil {
			break
		}
		c.emit(EventStoreRetry, err)
		_ = c.ex.clock.Sleep(dctx, backoff) // dctx.Err() ends the loop above
		backoff *= 4
	}
	return c.storeError("complete", err)
}

// runTx executes fn inside the store transaction that holds the claim.
func runTx[T any](ctx context.Context, c *call[T], claim Claim, txn Txn, fn func(context.Context) (T, error)) (v T, err error) {
	c.claimedEvent(claim)
	done := false
	defer func() {
		if p := recover(); p != nil {
			if !done {
				c.releaseTx(ctx, txn, fmt.Errorf("panic: %v", p))
			}
			panic(p)
		}
	}()
	v, err = fn(txn.Context(withRecordKey(ctx, c.key)))
	out, store, encErr := c.outcome(v, err)
	done = true
	if !store {
		if encErr != nil {
			err = encErr // nothing was committed: the caller must not see success
		}
		c.releaseTx(ctx, txn, err)
		var zero T
		if encErr != nil {
			return zero, err
		}
		return v, err
	}
	dctx, cancel := c.detached(ctx)
	defer cancel()
	if cerr := txn.Complete(dctx, out, c.m.TTL, out.Status == StatusFailedFinal); cerr != nil {
		// The commit failed: the method's writes were not committed either,
		// so the call did not happen and a retry will execute it.
		var zero T
		return zero, c.storeError("commit", cerr)
	}
	c.emit(EventCompleted, nil)
	return v, err
}

func (c *call[T]) releaseTx(ctx context.Context, txn Txn, cause error) {
	dctx, cancel := c.detached(ctx)
	defer cancel()
	if err := txn.Release(dctx); err != nil {
		c.emit(EventStoreError, fmt.Errorf("idem: rollback %s: %w", c.key.Text, err))
		return
	}
	c.emit(EventReleased, cause)
}

// waiter paces a duplicate that waits for a running call (inflight=wait:d).
type waiter struct {
	deadline time.Time
	clock    Clock
	backoff  time.Duration
}

// more reports whether there is time left to wait; a nil waiter has none.
func (w *waiter) more() bool { return w != nil && w.clock.Now().Before(w.deadline) }

func (w *waiter) sleep(ctx context.Context, leaseLeft time.Duration) error {
	if w.backoff == 0 {
		w.backoff = 2 * time.Millisecond
	} else {
		w.backoff = min(w.backoff*2, 100*time.Millisecond)
	}
	d := min(w.backoff, w.deadline.Sub(w.clock.Now()))
	if leaseLeft > 0 {
		d = min(d, leaseLeft+time.Millisecond)
	}
	d = max(d, time.Millisecond)
	return w.clock.Sleep(ctx, d)
}
