package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Nested claims (idem.NestingTxStore; docs/LAYERS.md): a call whose
// context carries the open transaction of an enclosing call of a TxStore on
// the same *sql.DB (an idemhttp or idemgrpc claim around a generated
// wrapper, a wrapped method calling another) claims its key inside that
// transaction, on its connection, under a savepoint, instead of taking a
// second connection of the pool for a second transaction. Without it, a
// pool whose every connection an enclosing call holds cannot serve the
// calls nested in them: every request waits for a connection that only a
// finished request frees.

// ErrOuterTxDone is returned by a nested claim whose enclosing call has
// already ended its transaction (a wrapped method called after the handler
// returned, from a goroutine that outlived it).
var ErrOuterTxDone = errors.New("mysqlstore: the enclosing idempotent call's transaction has ended")

// joinable is an open claim transaction of this package, top-level (txn)
// or nested (nestedTxn).
type joinable interface {
	// joined returns the top-level claim (which owns the connection, the
	// transaction and the locks), the nesting depth of this claim (0 at
	// the top), and whether it is still open.
	joined() (top *txn, depth int, open bool)
	// keep adds final records that calls nested in this claim stored.
	keep(...keptFinal)
}

// keptFinal is a final-error record a nested call stored: the enclosing
// claim writes it again when it rolls back the writes of its method
// (discardWrites), which roll back that record too. A final error's
// method wrote nothing that stays, so its record outlives the enclosing
// method's writes; a success's record goes with them (its writes are gone,
// so the call must run again).
type keptFinal struct {
	req idem.ClaimRequest
	out idem.Outcome
	ttl time.Duration
}

// keeper holds the final records of the calls nested in a claim. Nested
// calls run one after the other (idem.NestingTxStore), so it needs no lock.
type keeper struct{ kept []keptFinal }

func (k *keeper) keep(f ...keptFinal) { k.kept = append(k.kept, f...) }

// reapply writes kept again in tx, under the keys' locks the session still
// holds: each is claimed as a fresh claim would be and completed.
func (s *TxStore) reapply(ctx context.Context, tx *sql.Tx, kept []keptFinal) error {
	for _, f := range kept {
		c, err := s.claimRow(ctx, tx, f.req)
		if err != nil {
			return err
		}
		if !c.Claimed {
			continue // a live final record is there already
		}
		res, err := s.exec1(ctx, tx, s.q.completeTx, completeArgs(f.req.Key, f.req.Token, f.out, f.ttl)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = errors.New("a kept final record could not be written again")
			}
			return err
		}
	}
	return nil
}

// claimRow claims req's key in tx, its locks held: the INSERT of a fresh
// record, or, when the key has a record, a decision on the row read under
// its lock.
func (s *TxStore) claimRow(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	for range maxClaimAttempts {
		c, res, err := s.decide(ctx, tx, req, row{}, false)
		if err == nil && res == claimAgain {
			r, ok, lerr := s.load(ctx, tx, s.q.loadLocked, req.Key)
			if lerr != nil {
				return idem.Claim{}, lerr
			}
			c, res, err = s.decide(ctx, tx, req, r, ok)
		}
		if err != nil || res == claimDone {
			return c, err
		}
	}
	return idem.Claim{}, errors.New("the record kept changing under concurrent claims")
}

func (t *txn) joined() (*txn, int, bool) { return t, 0, !t.done.Load() }

func (t *nestedTxn) joined() (*txn, int, bool) {
	top, _, open := t.parent.joined()
	return top, t.depth, open && !t.done.Load()
}

// ClaimNested implements idem.NestingTxStore. outer must be an open claim
// of a TxStore on the same *sql.DB; otherwise nested is false and nothing
// is done (the executor opens a transaction of its own with ClaimTx).
//
// On outer's connection, in outer's transaction: the key's user-level
// locks are tried as in ClaimTx (a try, never a wait in the server; a key
// held by another transaction is tried again, off the lock and with pauses
// that grow to maxPollPause, until wait has passed, and then answered as
// ClaimTx answers it: with wait 0, at once, as idem.Method.Wait promises,
// not after the lock timeout); then a savepoint
// (idem_nested_N, N the nesting depth), and an INSERT of the PROCESSING
// record. A key that has a record (the INSERT fails on the primary key) is
// read under its row lock, which reads the latest committed version at
// every isolation level, and decided as in ClaimTx (a replay, a takeover).
// Deciding on a locking read keeps a stale snapshot of outer's transaction
// (REPEATABLE READ) from answering, and inserting first keeps a locking
// read of an absent key from taking a gap lock.
//
// The returned Txn's Complete stores the outcome in outer's transaction
// (rolling back to the savepoint first for a final error, then claiming
// again) and releases the savepoint, without committing: outer's Complete
// commits it with everything else, outer's Release rolls it back. Its
// Release rolls back to the savepoint. The key's locks are held until
// outer's transaction ends, so that no other claim waits in the server for
// the uncommitted record. A key that is not claimed (a replay, a live
// lease-mode record) leaves nothing in outer's transaction but the row's
// lock, which InnoDB keeps until the transaction ends.
func (s *TxStore) ClaimNested(ctx context.Context, outer idem.Txn, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, bool, error) {
	j, ok := outer.(joinable)
	if !ok {
		return idem.Claim{}, nil, false, nil
	}
	top, depth, open := j.joined()
	if top.store.db != s.db || top.store.table != s.table {
		return idem.Claim{}, nil, false, nil
	}
	if err := checkClaim(req); err != nil {
		return idem.Claim{}, nil, true, err
	}
	if !open {
		return idem.Claim{}, nil, true, fail("claim", req.Key, ErrOuterTxDone)
	}
	// No warm here: it may prepare on the pool, and outer holds a
	// connection of it. The enclosing claim warmed the store; a statement
	// dropped since is prepared in outer's transaction (see on).
	tx := top.tx.tx
	keyLock, payloadLock := s.lockName("k", req.Key, nil), s.lockName("p", req.Key, &req.Fingerprint)
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		got, err := tryLocks(ctx, tx, payloadLock, keyLock)
		if err != nil {
			return idem.Claim{}, nil, true, fail("claim", req.Key, err)
		}
		if got == 1 {
			break
		}
		if !time.Now().Before(deadline) {
			p := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
			if got == 0 {
				for i := range p.Record.Fingerprint {
					p.Record.Fingerprint[i] ^= 0xff
				}
			}
			return p, nil, true, nil
		}
		if err := sleepCtx(ctx, min(pause, time.Until(deadline))); err != nil {
			return idem.Claim{}, nil, true, fail("claim", req.Key, err)
		}
		pause = min(2*pause, maxPollPause)
	}
	// Both locks are held until outer's transaction ends (top's unlock).
	top.locks = append(top.locks, keyLock, payloadLock)
	sp := "idem_nested_" + strconv.Itoa(depth+1)
	c, err := s.claimIn(ctx, tx, sp, req)
	if err != nil || !c.Claimed {
		return c, nil, true, err
	}
	n := &nestedTxn{store: s, parent: j, top: top, depth: depth + 1, sp: sp, req: req}
	n.tx = &Tx{tx: tx}
	return c, n, true, nil
}

// tryLocks is takeLocks run in tx; got is 1 when both locks are taken; a 0
// (another payload holds the key) releases the payload's lock it took.
func tryLocks(ctx context.Context, tx *sql.Tx, payloadLock, keyLock string) (int64, error) {
	var got sql.NullInt64
	if err := tx.QueryRowContext(ctx, takeLocks(payloadLock, keyLock)).Scan(&got); err != nil {
		return 0, err
	}
	if !got.Valid {
		return 0, errors.New("GET_LOCK failed")
	}
	if got.Int64 == 0 {
		if _, err := tx.ExecContext(ctx, releaseLocks([]string{payloadLock})); err != nil {
			return 0, err
		}
	}
	return got.Int64, nil
}

// claimIn sets the savepoint sp in tx and claims req's key under it (the
// key's locks held): the INSERT of a fresh record, or, when the key has a
// record, a decision on the row read under its lock. When the key is not
// claimed, or a step fails, it rolls back to sp and releases it.
func (s *TxStore) claimIn(ctx context.Context, tx *sql.Tx, sp string, req idem.ClaimRequest) (c idem.Claim, err error) {
	bctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	if _, err := tx.ExecContext(bctx, "SAVEPOINT "+sp); err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	c, err = s.claimRow(bctx, tx, req)
	if err == nil && c.Claimed {
		return c, nil
	}
	if uerr := undoSavepoint(bctx, tx, sp); uerr != nil {
		err = errors.Join(err, uerr)
	}
	if err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	return c, nil
}

// undoSavepoint rolls tx back to sp and releases it.
func undoSavepoint(ctx context.Context, tx *sql.Tx, sp string) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+sp)
	return err
}

// nestedTxn is a claim held inside an enclosing claim's transaction.
type nestedTxn struct {
	store  *TxStore
	parent joinable // the enclosing claim
	top    *txn     // the top-level claim: the connection and the transaction
	depth  int
	sp     string // the savepoint set before the claim
	req    idem.ClaimRequest
	tx     *Tx
	done   atomic.Bool
	keeper // the final records of calls nested in this one
}

// Context implements idem.Txn: ctx carrying the (shared) transaction for
// TxFrom.
func (t *nestedTxn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.tx)
}

// Complete implements idem.Txn: with discardWrites it rolls back to the
// savepoint (the inner method's writes and the inner claim) and claims the
// key again under it (its locks still held); then it stores out in the
// claimed row and releases the savepoint. Nothing is committed: the
// enclosing claim's Complete commits the record with everything else, its
// Release rolls it back. An outcome too large for the server is replaced
// by the "outcome not stored" substitute, as at the top level. When a step
// fails it rolls back to the savepoint (no inner record, no inner write).
func (t *nestedTxn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("complete", t.req.Key, errTxnDone)
	}
	t.tx.over.Store(true)
	tx := t.top.tx.tx
	if err := checkOutcome(t.req.Key, out, ttl); err != nil {
		_ = undoSavepoint(ctx, tx, t.sp)
		return err
	}
	if err := t.store.fits(ctx, tx, t.req.Key, out); err != nil {
		if !errors.Is(err, idem.ErrTooLarge) {
			_ = undoSavepoint(ctx, tx, t.sp)
			return err
		}
		out = notStored()
	}
	bctx, cancel := t.store.bounded(ctx, outcomeLen(out))
	defer cancel()
	err := func() error {
		if discardWrites {
			if _, err := tx.ExecContext(bctx, "ROLLBACK TO SAVEPOINT "+t.sp); err != nil {
				return err
			}
			c, err := t.store.claimRow(bctx, tx, t.req)
			if err != nil {
				return err
			}
			if !c.Claimed {
				return errors.New("the key changed while its lock was held")
			}
			if err := t.store.reapply(bctx, tx, t.kept); err != nil {
				return err
			}
		}
		res, err := t.store.exec1(bctx, tx, t.store.q.completeTx, completeArgs(t.req.Key, t.req.Token, out, ttl)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				err = errors.New("the claimed row is gone: the transaction was rolled back (a deadlock or a lock wait timeout in the method?)")
			}
			return err
		}
		_, err = tx.ExecContext(bctx, "RELEASE SAVEPOINT "+t.sp)
		return err
	}()
	if err != nil {
		if uerr := undoSavepoint(ctx, tx, t.sp); uerr != nil {
			err = fmt.Errorf("%w (and rolling back to the savepoint: %w)", err, uerr)
		}
		return fail("complete", t.req.Key, err)
	}
	kept := t.kept
	if discardWrites {
		kept = append(kept[:len(kept):len(kept)], keptFinal{req: t.req, out: out, ttl: ttl})
	}
	if len(kept) > 0 {
		t.parent.keep(kept...)
	}
	return nil
}

// Release implements idem.Txn: it rolls back to the savepoint (the inner
// claim and the inner method's writes) and releases it; the enclosing
// transaction goes on. The key's locks stay held until it ends.
func (t *nestedTxn) Release(ctx context.Context) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("release", t.req.Key, errTxnDone)
	}
	t.tx.over.Store(true)
	if err := undoSavepoint(ctx, t.top.tx.tx, t.sp); err != nil {
		return fail("release", t.req.Key, err)
	}
	return nil
}

var (
	_ idem.NestingTxStore = (*TxStore)(nil)
	_ idem.Txn            = (*nestedTxn)(nil)
)
