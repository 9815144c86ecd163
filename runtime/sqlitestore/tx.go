package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TxStore is a SQLite idempotency store in transactional mode; it
// implements idem.TxStore, so an idem.Executor on it runs the claim, the
// method's own writes (through TxFrom) and the outcome in one transaction.
// Its Store methods (Claim, Complete, Release, Renew, Migrate, Sweep) are
// those of lease mode, except that Renew of a claim held by one of this
// store's open transactions answers nil: the transaction holds the key
// until it ends. It is safe for concurrent use.
//
// SQLite has one writer: while a call's transaction is open (while its
// method runs), every other write to the database waits. See the package
// documentation for what a concurrent call sees.
type TxStore struct {
	*Store
	mu   sync.Mutex
	held map[[32]byte]*hold // keys this process is claiming or holds in a transaction
}

// hold is a key this process is claiming, or holds in an open transaction.
type hold struct {
	fp    idem.Fingerprint
	token idem.Token
	done  chan struct{} // closed when the claim ends
}

// NewTx returns a store in transactional mode on db; the options are those
// of New. The table must exist (see Store.Migrate).
func NewTx(db *sql.DB, opts ...Option) *TxStore {
	return &TxStore{Store: New(db, opts...), held: make(map[[32]byte]*hold)}
}

// savepoint is set after the claim: a final error rolls the method's writes
// back to it and keeps the claim.
const (
	savepointSQL  = "SAVEPOINT idem_method"
	rollbackToSQL = "ROLLBACK TO idem_method"
)

// ClaimTx implements idem.TxStore.
//
// A live final record is replayed without the write lock. A duplicate of a
// call of this process whose claim is in flight or whose transaction is
// open waits for that call to end, at most wait, and then replays its
// committed outcome or claims the key if it rolled back; when wait runs out
// first it gets a PROCESSING record with the holder's fingerprint (the
// executor answers idem.ErrInProgress, or idem.ErrPayloadMismatch for
// another payload), without touching the write lock. Any other claim takes
// the write lock (BEGIN IMMEDIATE), waiting at most max(wait, the store's
// lock timeout) for this process's writers and the connection's
// busy_timeout for other processes', and fails with an error wrapping
// idem.ErrStoreFull when it is not free in time, having claimed nothing.
// When the key is claimed, the returned Txn holds the write lock and the
// connection until it ends.
func (s *TxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	start := time.Now()
	deadline := start.Add(wait)
	var mine *hold
	for mine == nil {
		if c, ok, err := s.replay(ctx, req); err != nil || ok {
			return c, nil, err
		}
		s.mu.Lock()
		h := s.held[req.Key.ID]
		if h == nil {
			mine = &hold{fp: req.Fingerprint, token: req.Token, done: make(chan struct{})}
			s.held[req.Key.ID] = mine
		}
		s.mu.Unlock()
		if h == nil {
			break
		}
		if h.token == req.Token {
			return idem.Claim{}, nil, fail("claim", req.Key, errors.New("the token already holds this key in an open transaction"))
		}
		left := time.Until(deadline)
		busy := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: h.fp, Token: h.token}}
		if left <= 0 {
			return busy, nil, nil
		}
		timer := time.NewTimer(left)
		select {
		case <-h.done:
			timer.Stop()
		case <-timer.C:
			return busy, nil, nil
		case <-ctx.Done():
			timer.Stop()
			return idem.Claim{}, nil, fail("claim", req.Key, ctx.Err())
		}
	}
	claimed := false
	defer func() {
		if !claimed {
			s.unhold(req.Key, mine)
		}
	}()
	conn, err := s.begin(ctx, max(wait-time.Since(start), s.lockTimeout))
	if err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	c, err := claimIn(ctx, conn, req, s.now().UnixNano())
	if err == nil && c.Claimed {
		_, err = conn.ExecContext(ctx, savepointSQL)
	}
	if err != nil || !c.Claimed {
		_ = s.finish(conn, errors.New("rollback"))
		if err != nil {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
		return c, nil, nil
	}
	claimed = true
	t := &txn{store: s, conn: conn, key: req.Key, token: req.Token, hold: mine}
	t.tx = &Tx{conn: conn, gate: s.gate}
	return c, t, nil
}

// unhold ends this process's claim of key.
func (s *TxStore) unhold(key idem.Key, h *hold) {
	s.mu.Lock()
	if s.held[key.ID] == h {
		delete(s.held, key.ID)
	}
	s.mu.Unlock()
	close(h.done)
}

// Renew implements idem.Renewer. A claim held by one of this store's open
// transactions needs no lease (the transaction holds the key until it
// ends): Renew answers nil while the transaction is open. Any other record
// is renewed as in lease mode.
func (s *TxStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	s.mu.Lock()
	h := s.held[key.ID]
	s.mu.Unlock()
	if h != nil && h.token == token {
		return nil
	}
	return s.Store.Renew(ctx, key, token, lease)
}

// txn is a claim held in an open transaction.
type txn struct {
	store *TxStore
	conn  *sql.Conn
	tx    *Tx
	key   idem.Key
	token idem.Token
	hold  *hold
	done  atomic.Bool
}

var errTxnDone = errors.New("sqlitestore: transaction already completed or released")

// Context implements idem.Txn: ctx carrying the transaction for TxFrom.
func (t *txn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.tx)
}

// end marks the transaction over; false when it already was.
func (t *txn) end() bool {
	if !t.done.CompareAndSwap(false, true) {
		return false
	}
	t.tx.over.Store(true)
	return true
}

// Complete implements idem.Txn: it rolls back to the savepoint (with
// discardWrites), stores out in the claimed row and commits.
func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.hold)
	if err := idem.CheckOutcome(&out, ttl); err != nil {
		err = fail("complete", t.key, err)
		_ = t.store.finish(t.conn, err)
		return err
	}
	err := func() error {
		if discardWrites {
			if _, err := t.conn.ExecContext(ctx, rollbackToSQL); err != nil {
				return err
			}
		}
		ok, err := completeIn(ctx, t.conn, t.key, t.token, out, ttl, t.store.now().UnixNano())
		if err == nil && !ok {
			err = errors.New("the claimed row is gone")
		}
		return err
	}()
	if err := t.store.finish(t.conn, err); err != nil {
		return fail("complete", t.key, err)
	}
	return nil
}

// Release implements idem.Txn: it rolls the transaction back, claim and
// method writes alike.
func (t *txn) Release(context.Context) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.hold)
	_ = t.store.finish(t.conn, errors.New("rollback"))
	return nil
}

type txKey struct{}

// Tx is the transaction of an idempotent call, as its method sees it (see
// TxFrom): it runs statements on the transaction's connection. The executor
// ends the transaction: a statement run after the call is over fails with
// ErrTxOver. Do not run COMMIT, ROLLBACK or RELEASE through it; use a
// SAVEPOINT of your own for a nested rollback.
type Tx struct {
	conn *sql.Conn
	gate chan struct{}
	over atomic.Bool
}

// ErrTxOver is returned by the statements of a Tx whose call is over.
var ErrTxOver = errors.New("sqlitestore: the idempotent call's transaction is over")

func (t *Tx) ended() bool { return t.over.Load() }

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.ended() {
		return nil, ErrTxOver
	}
	return t.conn.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.ended() {
		return nil, ErrTxOver
	}
	return t.conn.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction. After the call is over its Scan fails with sql.ErrConnDone.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.conn.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement on the transaction's connection.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if t.ended() {
		return nil, ErrTxOver
	}
	return t.conn.PrepareContext(ctx, query)
}

// TxFrom returns the transaction of the idempotent call that ctx belongs
// to, inside a method run by an idem.Executor on a TxStore. Write the
// method's business rows through it, so that they commit with the outcome
// or not at all. Do not write through the *sql.DB meanwhile: the
// transaction holds SQLite's only write lock, so such a write would wait for
// the call to end.
func TxFrom(ctx context.Context) (*Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*Tx)
	return tx, ok
}

var (
	_ idem.TxStore = (*TxStore)(nil)
	_ idem.Renewer = (*TxStore)(nil)
	_ idem.Txn     = (*txn)(nil)
)
