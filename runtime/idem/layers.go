package idem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// This file is what lets idempotency layers stacked in one request
// cooperate (docs/LAYERS.md): an edge layer (idemhttp, idemgrpc) around a
// generated wrapper, or one wrapped method calling another.
//
//   - Transactions: a Do in transactional mode whose context carries the
//     open transaction of an enclosing Do claims its key inside that
//     transaction (NestingTxStore), so that the request costs one
//     transaction and one connection, and every record and the business
//     writes commit or roll back together.
//   - Decisions: an edge layer installs a Decisions cell in the context of
//     the handler it runs (WithDecisions); a Do under it records there
//     whether its outcome is stored (a success or a final error, replayed
//     to every retry) or released (a transient error: the next retry runs
//     again), and the edge follows that decision instead of its status
//     policy.

// NestingTxStore is implemented by TxStores that can claim a key inside a
// transaction opened by one of their own claims (pgstore.TxStore). The
// executor calls ClaimNested instead of ClaimTx when the context of a Do
// carries the open Txn of an enclosing Do (an edge layer's claim, or a
// wrapped method calling another).
type NestingTxStore interface {
	TxStore
	// ClaimNested claims req's key inside outer's open transaction, under a
	// savepoint: the returned Txn's Complete stores the outcome in that
	// transaction without committing it (outer's Complete commits it, or
	// outer's Release rolls it back with everything else), and its Release
	// rolls back to the savepoint (the inner claim and the inner method's
	// writes), leaving outer's transaction usable. When the key is not
	// claimed (a stored outcome, a call in progress, another payload),
	// nothing of the attempt is left in outer's transaction.
	//
	// nested is false, and nothing is done, when outer is not a transaction
	// this store can join (another store's, on another database): the
	// executor then calls ClaimTx. Only one call may use outer's
	// transaction at a time: nested calls run one after the other, not
	// concurrently.
	ClaimNested(ctx context.Context, outer Txn, req ClaimRequest, wait time.Duration) (claim Claim, txn Txn, nested bool, err error)
}

// withOpenTxn returns ctx carrying txn, the transaction of the running
// call, for the Do calls inside the method (see NestingTxStore).
func withOpenTxn(ctx context.Context, txn Txn) context.Context {
	return withField(ctx, fTxn, "", txn)
}

// OpenTxn returns the open transaction of the transactional Do that ctx
// belongs to (the innermost, when calls are nested), or nil. A Do on a
// NestingTxStore joins it; it is exported for layers that are not Do (and
// for tests).
func OpenTxn(ctx context.Context) Txn {
	return lookup(ctx, fTxn).txn
}

// Decision is what one Do decided about the key it was given.
type Decision uint8

const (
	// Undecided: no Do recorded anything.
	Undecided Decision = iota
	// Stored: the method ran and its outcome (a success or a final error)
	// is stored, or a stored outcome was replayed: every retry of the
	// request sees that answer.
	Stored
	// Released: the method returned a transient error (or panicked), or
	// the call was refused before running it (in progress, another
	// payload, the store unavailable or full, its outcome not committed):
	// nothing is stored, and a retry runs the method again.
	Released
)

// String returns "undecided", "stored" or "released".
func (d Decision) String() string {
	switch d {
	case Stored:
		return "stored"
	case Released:
		return "released"
	}
	return "undecided"
}

// Decisions collects the decisions of the Do calls made directly inside
// one run of an edge layer's handler: the edge installs it with
// WithDecisions and reads Verdict when the handler returned. Calls nested
// deeper (a wrapped method calling another) are decided by the call that
// encloses them, and are not recorded. It is safe for concurrent use
// (handlers may call wrapped methods from several goroutines).
type Decisions struct {
	mu                         sync.Mutex
	stored, released, replayed int
}

// WithDecisions returns ctx carrying d: the Do calls made with it (and not
// inside another Do) record their decisions in d.
func WithDecisions(ctx context.Context, d *Decisions) context.Context {
	return withField(ctx, fDecisions, "", d)
}

// record notes one call's decision, and whether it was answered with a
// stored outcome without running its method; a nil cell records nothing.
func (d *Decisions) record(dec Decision, replayed bool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	switch dec {
	case Stored:
		d.stored++
		if replayed {
			d.replayed++
		}
	case Released:
		d.released++
	}
	d.mu.Unlock()
}

// Replayed reports whether a recorded call was answered with an outcome
// stored by an earlier call (a retry of its business key, or a duplicate
// that waited for it) instead of running its method: the edge layer tells
// its client that the answer was decided by a wrapped method's key, not by
// the edge's own (idemhttp's Idempotent-Replayed-By).
func (d *Decisions) Replayed() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replayed > 0
}

// Verdict is the decision the enclosing layer follows: Released when any
// recorded call released its key or was refused (a retry must run the
// request again, so that that call runs again), else Stored when at least
// one call stored or replayed an outcome, else Undecided (no Do ran: the
// edge applies its own policy).
func (d *Decisions) Verdict() Decision {
	if d == nil {
		return Undecided
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.released > 0:
		return Released
	case d.stored > 0:
		return Stored
	}
	return Undecided
}

// methodContext hides the caller's Decisions cell from the method a Do
// runs (the Do itself records into it), so that the calls inside the
// method are decided by this one. It costs nothing when there is none.
func methodContext(ctx context.Context, d *Decisions) context.Context {
	if d == nil {
		return ctx
	}
	return withField(ctx, fDecisions, "", (*Decisions)(nil))
}

// claimTx claims req's key in transactional mode: inside the open
// transaction of the enclosing call (outer, from ctx) when there is one that
// ts can join (NestingTxStore), in a transaction of its own otherwise.
func claimTx(ctx context.Context, outer Txn, ts TxStore, req ClaimRequest, wait time.Duration) (Claim, Txn, error) {
	if outer != nil {
		if ns, ok := ts.(NestingTxStore); ok {
			claim, txn, nested, err := ns.ClaimNested(ctx, outer, req, wait)
			if nested || err != nil {
				return claim, txn, err
			}
		}
	}
	return ts.ClaimTx(ctx, req, wait)
}

// doRecorded is Do under an edge layer's Decisions cell d: the method runs
// without the cell (the calls inside it are this call's to decide), and
// this call's decision is recorded in d.
func doRecorded[T any](ctx context.Context, s *callState, ex *Executor, m *Method, parts *KeyParts, h *Hasher, fn func(context.Context) (T, error)) (T, error) {
	d := s.decisions
	var ran atomic.Bool // the method ran for this call (else a success or final error is a replay)
	inner := func(ctx context.Context) (T, error) {
		ran.Store(true)
		return fn(methodContext(ctx, d))
	}
	var v T
	var err error
	if ex.hook != nil {
		v, err = hooked(ctx, ex, m, parts, h, inner)
	} else {
		v, err = do(ctx, s, ex, m, parts, h, inner, nil)
	}
	d.record(decisionOf(err), !ran.Load())
	return v, err
}

// decisionOf tells what the result of a Do says about its key: a success
// and a final error (the first call's, marked by markFinal, or a replayed
// one) are stored; any other error (the method's transient error, a
// refusal, an outcome whose commit failed) leaves the key to a retry.
func decisionOf(err error) Decision {
	if err == nil || errors.Is(err, ErrFinal) {
		return Stored
	}
	return Released
}

// ClientKey returns the idempotency key of the call ctx belongs to
// (KeyFrom), or "" when there is none. Inside an idemhttp or idemgrpc
// handler it is the client's key (the Idempotency-Key header, the
// idempotency-key metadata) scoped by the edge's tenant and operation;
// under a consumer that called ContextWithKey, the message's. Generated
// wrappers read it for the key part clientkey (docs/ANNOTATIONS.md): ""
// is an empty key part, so the call fails with ErrMissingKey instead of
// sharing one record with every call that has no key.
func ClientKey(ctx context.Context) string {
	k, _ := KeyFrom(ctx)
	return k
}
