package pgstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Nested claims (idem.NestingTxStore; docs/LAYERS.md): a call whose
// context carries the open transaction of an enclosing call on the same
// pool (an idemhttp or idemgrpc claim around a generated wrapper, a wrapped
// method calling another) claims its key inside that transaction, under the
// savepoint idem_nested, instead of taking a second connection for a second
// transaction. The method's own savepoint is idem_method, as at the top
// level: PostgreSQL resolves a savepoint name to the most recent savepoint
// of that name, and releasing idem_nested releases the inner idem_method,
// so the levels stack.
const (
	nestSavepointSQL  = "SAVEPOINT idem_nested"
	nestRollbackToSQL = "ROLLBACK TO SAVEPOINT idem_nested"
	nestReleaseSQL    = "RELEASE SAVEPOINT idem_nested"
	// The enclosing claim left idemgen.key_locked on in the transaction:
	// the inner claim statement inserts only under the inner key's lock.
	nestResetSQL = "SELECT set_config('idemgen.key_locked', 'off', true)"
)

// joinable is an open claim transaction of this package, top-level (txn)
// or nested (nestedTxn).
type joinable interface {
	// joined returns the raw transaction and the store that opened it, and
	// whether the claim is still open.
	joined() (pgx.Tx, *TxStore, bool)
	// keep adds final records that calls nested in this claim stored
	// (keep.go).
	keep(...keptFinal)
	// top returns the top-level claim, which owns the connection.
	top() *txn
}

func (t *txn) joined() (pgx.Tx, *TxStore, bool) { return t.mtx.Tx, t.store, !t.done.Load() }

func (t *nestedTxn) joined() (pgx.Tx, *TxStore, bool) { return t.tx, t.store, !t.done.Load() }

func (t *txn) top() *txn { return t }

func (t *nestedTxn) top() *txn { return t.parent.top() }

// ErrOuterTxDone is returned by a nested claim whose enclosing call has
// already ended its transaction (a wrapped method called after the
// handler returned, from a goroutine that outlived it).
var ErrOuterTxDone = errors.New("pgstore: the enclosing idempotent call's transaction has ended")

// ClaimNested implements idem.NestingTxStore: it claims the key inside
// outer's transaction, under a savepoint, and the returned Txn holds it
// until outer's transaction ends. outer must be an open claim of a TxStore
// on the same pool (same database), and s must not be partitioned
// (WithPartitions); otherwise nested is false and nothing is done (the
// executor opens a transaction of its own with ClaimTx). See the package
// documentation, section Nested claims.
func (s *TxStore) ClaimNested(ctx context.Context, outer idem.Txn, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, bool, error) {
	j, ok := outer.(joinable)
	if !ok || s.part != nil {
		return idem.Claim{}, nil, false, nil
	}
	tx, owner, open := j.joined()
	if owner.pool != s.pool {
		return idem.Claim{}, nil, false, nil
	}
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, nil, true, fail("claim", req.Key, err)
	}
	if !open {
		return idem.Claim{}, nil, true, fail("claim", req.Key, ErrOuterTxDone)
	}
	deadline := time.Now().Add(wait) // wait 0: one try, as idem.Method.Wait promises
	pause := time.Millisecond
	for {
		c, t, busy, err := s.claimNestedOnce(ctx, j, tx, req)
		if t != nil {
			return c, t, true, nil
		}
		if err != nil || !busy || !time.Now().Before(deadline) {
			return c, nil, true, err
		}
		if err := sleepCtx(ctx, min(pause, time.Until(deadline))); err != nil {
			return idem.Claim{}, nil, true, fail("claim", req.Key, err)
		}
		pause = min(2*pause, maxPollPause)
	}
}

// claimNestedOnce is one attempt of ClaimNested: the savepoint idem_nested
// and ClaimTx's statements in one round trip, a second one for the full
// claim where the fast one left the record to it (as claimTxPlain does), and
// the savepoint undone unless the key was claimed. busy reports a key held
// by another transaction.
func (s *TxStore) claimNestedOnce(ctx context.Context, parent joinable, tx pgx.Tx, req idem.ClaimRequest) (idem.Claim, *nestedTxn, bool, error) {
	args := s.claimArgs(req)
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	q := s.sql.nestText
	var (
		d     decision
		claim idem.Claim
		res   claimResult
	)
	b := &pgx.Batch{}
	b.Queue(nestSavepointSQL)
	b.Queue(nestResetSQL)
	b.Queue(q.decide, keyLock(req.Key), req.Key.ID[:], pa, pb).Query(func(rows pgx.Rows) error {
		var err error
		d, err = scanDecision(rows, req)
		return err
	})
	b.Queue(q.fast, args...).Query(func(rows pgx.Rows) error {
		var err error
		claim, res, err = scanClaim(rows, true)
		return err
	})
	b.Queue(q.savepoint)
	err := tx.SendBatch(ctx, b).Close()
	if err == nil && d.kind == decideBusy {
		err = busyPayload(ctx, tx, req, &d)
	}
	if err == nil && d.kind == decideLocked && res != claimAnswered {
		claim, err = s.claimLocked(ctx, tx, q, args, res)
	}
	if err == nil && d.kind == decideLocked && claim.Claimed {
		t := &nestedTxn{store: s, tx: tx, parent: parent, req: req}
		t.mtx = &methodTx{Tx: tx}
		return claim, t, false, nil
	}
	// Not claimed, or failed: nothing of the attempt stays.
	if uerr := undoNested(ctx, tx); uerr != nil {
		return idem.Claim{}, nil, false, fail("claim", req.Key, errors.Join(err, uerr))
	}
	if err != nil {
		return idem.Claim{}, nil, false, fail("claim", req.Key, err)
	}
	if d.kind != decideLocked {
		return d.claim, nil, d.kind == decideBusy, nil
	}
	return claim, nil, false, nil
}

// undoNested rolls tx back to the savepoint idem_nested and releases it,
// in one round trip of the simple protocol (an Exec without arguments):
// the transaction may be failed, and a failed transaction prepares no
// statement.
func undoNested(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, nestRollbackToSQL+"; "+nestReleaseSQL)
	return err
}

// nestedTxn is a claim held inside an enclosing claim's transaction.
type nestedTxn struct {
	store  *TxStore
	tx     pgx.Tx            // the enclosing claim's transaction
	parent joinable          // the enclosing claim
	req    idem.ClaimRequest // the claim: its key and token
	mtx    *methodTx
	done   atomic.Bool
	keeper // the final records of calls nested in this one (keep.go)
}

// Context implements idem.Txn: ctx carrying the (shared) transaction for
// TxFrom.
func (t *nestedTxn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.mtx)
}

// Complete implements idem.Txn: in one round trip it rolls back to the
// method's savepoint (with discardWrites, writing the final records of the
// calls nested in this one again: keep.go), stores out in the claimed row
// and releases the savepoint idem_nested. Nothing is committed: the
// enclosing claim's Complete commits the record with everything else, and
// its Release rolls it back; a final error's record, and those this call
// kept, are kept by the enclosing claim in turn. When it fails, it rolls
// back to the savepoint (no inner record, no inner write) if the
// transaction is still usable.
func (t *nestedTxn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("complete", t.req.Key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	args, err := completeArgs(t.req.Key, t.req.Token, out, ttl)
	if err != nil {
		_ = undoNested(ctx, t.tx)
		return err
	}
	kept := t.list()
	b := &pgx.Batch{}
	if discardWrites {
		queueDiscard(b, t.store.sql.reapply, kept, &t.top().mayHoldSessionLocks)
	}
	b.Queue(t.store.sql.complete, args...).Exec(func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			return errors.New("the claimed row is gone")
		}
		return nil
	})
	b.Queue(nestReleaseSQL)
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		_ = undoNested(ctx, t.tx)
		return fail("complete", t.req.Key, err)
	}
	if f, ok := finalKept(t.req, out, ttl); ok {
		kept = append(kept[:len(kept):len(kept)], f)
	}
	if len(kept) > 0 {
		t.parent.keep(kept...)
	}
	return nil
}

// Release implements idem.Txn: it rolls back to the savepoint idem_nested
// (the inner claim and the inner method's writes) and releases it; the
// enclosing transaction goes on.
func (t *nestedTxn) Release(ctx context.Context) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("release", t.req.Key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	if err := undoNested(ctx, t.tx); err != nil {
		return fail("release", t.req.Key, err)
	}
	return nil
}

var (
	_ idem.NestingTxStore = (*TxStore)(nil)
	_ idem.Txn            = (*nestedTxn)(nil)
)
