package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ErrOuterTxDone is returned by a nested claim whose enclosing call has
// already ended its transaction (a wrapped method called after the
// handler returned, from a goroutine that outlived it).
var ErrOuterTxDone = errors.New("sqlitestore: the enclosing idempotent call's transaction has ended")

// joinable is a claim whose transaction a nested claim can join: txn (the
// top-level claim, which owns the connection and the write lock) and
// nestedTxn.
type joinable interface {
	// joined returns the top-level claim, the nesting depth (0 for the
	// top) and whether every claim from the top to this one is open.
	joined() (top *txn, depth int, open bool)
}

func (t *txn) joined() (*txn, int, bool) { return t, 0, !t.done.Load() }

func (t *nestedTxn) joined() (*txn, int, bool) {
	top, _, open := t.parent.joined()
	return top, t.depth, open && !t.done.Load()
}

// ClaimNested implements idem.NestingTxStore: a Do inside a transactional
// call of this store (an edge layer's claim, idemhttp's door, and the
// wrapped method its handler calls) claims its key inside that call's
// transaction, which holds SQLite's only write lock, instead of waiting for
// the lock its own caller holds. outer must be an open claim of s;
// otherwise nested is false and nothing is done (the executor calls
// ClaimTx, which refuses a call nested in another store's transaction on
// the same file).
//
// On outer's connection: a savepoint (idem_nested_N, N the nesting depth)
// and the claim ClaimTx runs under the write lock (a replay, a takeover, a
// fresh PROCESSING row). A key that another call of this process is
// claiming or holds is answered at once as ClaimTx answers it when its wait
// runs out (a PROCESSING record with the holder's fingerprint), whatever
// wait: that holder cannot go on while outer holds the write lock. When
// the key is not claimed nothing of the attempt stays in outer's
// transaction.
//
// The returned Txn's Complete stores the outcome in outer's transaction
// (rolling back the inner method's writes first for a final error) and
// releases the savepoint, without committing: outer's Complete commits it
// with everything else, outer's Release rolls it back; a final error of
// outer (discardWrites) rolls back the inner record with the inner writes,
// so that a retry runs the inner method again, its writes never committed.
// Its Release rolls back to the savepoint: the inner claim and the inner
// method's writes.
func (s *TxStore) ClaimNested(ctx context.Context, outer idem.Txn, req idem.ClaimRequest, _ time.Duration) (idem.Claim, idem.Txn, bool, error) {
	j, ok := outer.(joinable)
	if !ok {
		return idem.Claim{}, nil, false, nil
	}
	top, depth, open := j.joined()
	if top.store != s {
		return idem.Claim{}, nil, false, nil
	}
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, nil, true, fail("claim", req.Key, err)
	}
	if !open {
		return idem.Claim{}, nil, true, fail("claim", req.Key, ErrOuterTxDone)
	}
	s.mu.Lock()
	h := s.held[req.Key.ID]
	var mine *hold
	if h == nil {
		mine = &hold{fp: req.Fingerprint, token: req.Token, done: make(chan struct{})}
		s.held[req.Key.ID] = mine
	}
	s.mu.Unlock()
	if h != nil {
		if h.token == req.Token {
			return idem.Claim{}, nil, true, fail("claim", req.Key, errors.New("the token already holds this key in an open transaction"))
		}
		return idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: h.fp, Token: h.token}}, nil, true, nil
	}
	sp := "idem_nested_" + strconv.Itoa(depth+1)
	method := "idem_method_" + strconv.Itoa(depth+1)
	conn := top.conn
	c, err := func() (idem.Claim, error) {
		if _, err := conn.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			return idem.Claim{}, err
		}
		c, err := claimIn(ctx, conn, req, s.now().UnixNano())
		if err == nil && c.Claimed {
			_, err = conn.ExecContext(ctx, "SAVEPOINT "+method)
		}
		if err != nil || !c.Claimed {
			if uerr := undoSavepoint(conn, sp); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		return c, err
	}()
	if err != nil || !c.Claimed {
		s.unhold(req.Key, mine)
		if err != nil {
			return idem.Claim{}, nil, true, fail("claim", req.Key, err)
		}
		return c, nil, true, nil
	}
	n := &nestedTxn{store: s, parent: j, conn: conn, depth: depth + 1, sp: sp, method: method, key: req.Key, token: req.Token, hold: mine}
	n.tx = &Tx{conn: conn, gate: s.gate}
	return c, n, true, nil
}

// undoSavepoint rolls back to the savepoint sp and releases it. It runs
// without the caller's context: a canceled context must not leave the
// savepoint's writes in the enclosing transaction.
func undoSavepoint(conn *sql.Conn, sp string) error {
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK TO "+sp); err != nil {
		return err
	}
	_, err := conn.ExecContext(context.Background(), "RELEASE "+sp)
	return err
}

// nestedTxn is a claim held inside an enclosing claim's transaction.
type nestedTxn struct {
	store  *TxStore
	parent joinable
	conn   *sql.Conn // the top-level claim's connection
	tx     *Tx
	depth  int
	sp     string // the claim's savepoint
	method string // the method's savepoint: a final error rolls back to it
	key    idem.Key
	token  idem.Token
	hold   *hold
	done   atomic.Bool
}

// Context implements idem.Txn: ctx carrying the (shared) transaction for
// TxFrom.
func (t *nestedTxn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.tx)
}

// end marks the nested claim over; false when it already was.
func (t *nestedTxn) end() bool {
	if !t.done.CompareAndSwap(false, true) {
		return false
	}
	t.tx.over.Store(true)
	return true
}

// Complete implements idem.Txn: it rolls back to the method's savepoint
// (with discardWrites), stores out in the claimed row and releases the
// claim's savepoint, without committing (see ClaimNested). When it fails,
// it rolls back to the claim's savepoint: no inner record, no inner write.
func (t *nestedTxn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.hold)
	if _, _, open := t.parent.joined(); !open {
		return fail("complete", t.key, ErrOuterTxDone)
	}
	err := func() error {
		if err := idem.CheckOutcome(&out, ttl); err != nil {
			return err
		}
		if discardWrites {
			if _, err := t.conn.ExecContext(ctx, "ROLLBACK TO "+t.method); err != nil {
				return err
			}
		}
		ok, err := completeIn(ctx, t.conn, t.key, t.token, out, ttl, t.store.now().UnixNano())
		if err == nil && !ok {
			err = errors.New("the claimed row is gone")
		}
		if err == nil {
			_, err = t.conn.ExecContext(ctx, "RELEASE "+t.sp)
		}
		return err
	}()
	if err != nil {
		if uerr := undoSavepoint(t.conn, t.sp); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return fail("complete", t.key, err)
	}
	return nil
}

// Release implements idem.Txn: it rolls back to the claim's savepoint, the
// claim and the inner method's writes alike, leaving the enclosing
// transaction usable.
func (t *nestedTxn) Release(context.Context) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.hold)
	if _, _, open := t.parent.joined(); !open {
		return nil // the enclosing transaction ended: nothing of it stays
	}
	if err := undoSavepoint(t.conn, t.sp); err != nil {
		return fail("release", t.key, err)
	}
	return nil
}

var (
	_ idem.NestingTxStore = (*TxStore)(nil)
	_ idem.Txn            = (*nestedTxn)(nil)
)
