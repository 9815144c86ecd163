package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TxStore is a MySQL or MariaDB idempotency store in transactional mode; it
// implements idem.TxStore, so an idem.Executor on it runs the claim, the
// method's own writes (through TxFrom) and the outcome in one transaction:
// they commit together or not at all. Its Store methods (Claim, Complete,
// Release, Renew, Migrate, Sweep) are those of lease mode, except that
// Renew of a claim held by one of this store's open transactions answers
// nil: the transaction holds the key until it ends. It is safe for
// concurrent use.
type TxStore struct {
	*Store
	mu   sync.Mutex
	held map[[32]byte]idem.Token // keys this store holds in an open transaction
	// wsrep is whether the server is a Galera node (refuseGalera).
	wsrep atomic.Int32
}

// NewTx returns a store in transactional mode on db; the options are those
// of New. The table must exist (see Store.Migrate).
func NewTx(db *sql.DB, opts ...Option) *TxStore {
	return &TxStore{Store: New(db, opts...), held: make(map[[32]byte]idem.Token)}
}

// maxPollPause is the longest pause between two looks of a duplicate that
// waits for a key held by another transaction.
const maxPollPause = 50 * time.Millisecond

// lockName returns the name of a user-level lock (GET_LOCK) of the store's
// table: tag "k" for a key, "p" for a key and a payload. Names are 64 hex
// digits, the longest MySQL and MariaDB accept, and name the table so that
// two stores' keys never share a lock.
func (s *Store) lockName(tag string, key idem.Key, fp *idem.Fingerprint) string {
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write([]byte(s.table))
	h.Write([]byte{0})
	h.Write(key.ID[:])
	if fp != nil {
		h.Write(fp[:])
	}
	var sum [32]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// takeLocks tries, without waiting, the lock of req's payload and then the
// lock of req's key: 1 when both are taken, 0 when the key is held by a
// claim of another payload (the payload's lock was taken and released), -1
// when the payload's lock is held (a claim of the same payload is running).
// The holder of a key's lock always holds its payload's lock first, so a 0
// is never a claim of the same payload.
// The names are hex digits, spliced into the statement (never a
// parameter): a statement without parameters is one round trip, where a
// prepared one with parameters is two (prepare and execute) unless cached.
func takeLocks(payloadLock, keyLock string) string {
	return "SELECT IF(GET_LOCK('" + payloadLock + "', 0) = 1, GET_LOCK('" + keyLock + "', 0), -1)"
}

func releaseLocks(locks []string) string {
	return "DO RELEASE_LOCK('" + strings.Join(locks, "'), RELEASE_LOCK('") + "')"
}

// ClaimTx implements idem.TxStore.
//
// It reads the key's committed record first, without a lock (one round
// trip): a live final record is replayed. Otherwise it takes a connection
// from the pool and, in one statement, tries two user-level locks
// (GET_LOCK, with a timeout of 0: it never waits on the server): the lock
// of the key and payload, then the lock of the key. When it gets both it
// opens a transaction (at the session's isolation level), inserts the
// PROCESSING record (or takes over an expired record or a lapsed lease)
// (no savepoint: a final error rolls the transaction back and writes the
// record afresh, under the key's lock still held); the returned Txn then owns the transaction, the
// connection and the locks until Complete or Release. The record is never
// committed as PROCESSING: a duplicate sees either nothing (the call is
// running, or rolled back) or the committed outcome.
//
// When another transaction holds the key's lock, the answer is a
// PROCESSING record with req's fingerprint when that transaction runs the
// same payload (the executor reports idem.ErrInProgress), or one that
// differs from it when it runs another (idem.ErrPayloadMismatch). A caller
// that waits (wait > 0) polls, off any connection, with a backoff from 1ms
// to 50ms, until the holder's outcome is committed (replayed), the holder
// rolled back (claimed), or wait has passed. No duplicate waits on a lock
// in the server, so a duplicate never hangs. A claim whose statement the
// server rolls back to break a deadlock (error 1213: its transaction is
// gone, nothing was decided) releases the key and looks again, up to the
// claim's attempts.
//
// Use one mode per table: a lease-mode claim of a key that a transactional
// claim holds waits for that transaction, at most the lock timeout.
//
// On a MariaDB Galera cluster every claim fails with ErrGalera: the locks
// are not replicated across its nodes.
func (s *TxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	if err := checkClaim(req); err != nil {
		return idem.Claim{}, nil, err
	}
	if err := s.refuseGalera(ctx); err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	if err := s.warm(ctx); err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for attempt := 0; ; attempt++ {
		r, ok, err := s.look(ctx, req.Key, wait)
		if err != nil {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
		if ok && settled(&r, req) {
			return idem.Claim{Record: r.rec}, nil, nil
		}
		c, t, busy, err := s.claimTx(ctx, req, ok, wait)
		if err != nil && (errNumber(err) != errDeadlock || attempt >= maxClaimAttempts) {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
		// A deadlock's victim: the server rolled the claim's transaction
		// back (claimTx released the key), nothing was decided; look again.
		if err == nil && (t != nil || (!busy && c.Record.Status != 0)) {
			return c, t, nil
		}
		if busy && (wait <= 0 || !time.Now().Before(deadline)) {
			return c, nil, nil
		}
		if !busy && attempt >= maxClaimAttempts {
			return idem.Claim{}, nil, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
		}
		if err := sleepCtx(ctx, min(pause, time.Until(deadline))); err != nil {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
		pause = min(2*pause, maxPollPause)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// look reads the committed record of key for ClaimTx, on the pool. When
// every connection of the pool is in use, it waits for one at most
// max(wait, the acquire timeout), then fails with idem.ErrStoreBusy (see
// WithAcquireTimeout and acquireLimit).
func (s *TxStore) look(ctx context.Context, key idem.Key, wait time.Duration) (row, bool, error) {
	if !s.saturated() {
		// A connection is free or can be opened: no timer (a replay's
		// path). Should another call take it first, this one waits for
		// that call's statement, holding nothing.
		return s.loadCommitted(ctx, key)
	}
	limit := max(wait, s.acquire)
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	r, ok, err := s.loadCommitted(lctx, key)
	return r, ok, s.busyErr(ctx, err, limit)
}

// saturated reports whether every connection the pool may open is in use.
func (s *Store) saturated() bool {
	st := s.db.Stats()
	return st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections
}

// busyErr turns err, the end of a wait for a connection bounded by limit
// (not by ctx), into an error wrapping idem.ErrStoreBusy.
func (s *Store) busyErr(ctx context.Context, err error, limit time.Duration) error {
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		st := s.db.Stats()
		return fmt.Errorf("the pool's connections are all in use (%d of %d) and none freed up within %v: %w",
			st.InUse, st.MaxOpenConnections, limit, idem.ErrStoreBusy)
	}
	return err
}

// acquireConn takes the connection a transactional claim holds until its
// call ends: its only one (warm prepared the statements it runs, and its
// reads of committed rows ran before it). When every connection of the
// pool is in use, it waits at most max(wait, the acquire timeout), then
// fails with idem.ErrStoreBusy (see acquireLimit).
func (s *TxStore) acquireConn(ctx context.Context, wait time.Duration) (*sql.Conn, error) {
	limit := s.acquireLimit(wait)
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn, err := s.db.Conn(actx)
	return conn, s.busyErr(ctx, err, limit)
}

// acquireLimit bounds a wait for a connection of the pool: max(wait, the
// acquire timeout) when every connection is in use; when the pool may
// still open one (which takes as long as a connection takes to open, or
// another caller may take the last one first), the lock timeout at least.
func (s *TxStore) acquireLimit(wait time.Duration) time.Duration {
	limit := max(wait, s.acquire)
	if !s.saturated() {
		limit = max(limit, s.lockTimeout)
	}
	return limit
}

// txOptions are the options of the store's claim transactions: the
// session's isolation level, for the method's sake, unless the pool's
// sessions run at READ UNCOMMITTED, which is raised to READ COMMITTED
// (the store's reads in the transaction must not see uncommitted rows).
func (s *Store) txOptions() *sql.TxOptions {
	if info := s.info.Load(); info != nil && info.dirty {
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return nil
}

// claimTx is one attempt of ClaimTx: a claimed Txn, a decided record, busy
// (another transaction holds the key), or neither (look again).
func (s *TxStore) claimTx(ctx context.Context, req idem.ClaimRequest, exists bool, wait time.Duration) (c idem.Claim, t *txn, busy bool, err error) {
	// The wait for a connection is bounded by the acquire timeout (or the
	// caller's wait), not by the lock timeout of the statements: a pool
	// held by running calls is ErrStoreBusy, not an unavailable store.
	conn, err := s.acquireConn(ctx, wait)
	if err != nil {
		return idem.Claim{}, nil, false, err
	}
	ctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	keyLock, payloadLock := s.lockName("k", req.Key, nil), s.lockName("p", req.Key, &req.Fingerprint)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, takeLocks(payloadLock, keyLock)).Scan(&got); err != nil {
		discard(conn)
		return idem.Claim{}, nil, false, err
	}
	switch {
	case !got.Valid:
		discard(conn)
		return idem.Claim{}, nil, false, errors.New("GET_LOCK failed")
	case got.Int64 != 1:
		p := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
		if got.Int64 == 0 { // another payload holds the key
			for i := range p.Record.Fingerprint {
				p.Record.Fingerprint[i] ^= 0xff
			}
			if _, err := conn.ExecContext(ctx, releaseLocks([]string{payloadLock})); err != nil {
				discard(conn)
				return idem.Claim{}, nil, false, err
			}
		}
		_ = conn.Close()
		return p, nil, true, nil
	}
	locks := []string{keyLock, payloadLock}
	// The transaction outlives this call (the executor ends it through the
	// Txn): database/sql rolls a transaction back when its context ends.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), s.txOptions())
	if err != nil {
		unlock(conn, locks)
		return idem.Claim{}, nil, false, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tx.Rollback()
			unlock(conn, locks)
		}
	}()
	// Under the key's lock no other transactional claim writes the row:
	// when the first read saw none, insert at once.
	res := claimAgain
	if !exists {
		c, res, err = s.decide(ctx, tx, req, row{}, false)
		if err != nil {
			return idem.Claim{}, nil, false, err
		}
	}
	if res == claimAgain {
		r, found, err := s.load(ctx, tx, s.q.load, req.Key)
		if err != nil {
			return idem.Claim{}, nil, false, err
		}
		if c, res, err = s.decide(ctx, tx, req, r, found); err != nil {
			return idem.Claim{}, nil, false, err
		}
		if res == claimAgain {
			return idem.Claim{}, nil, false, nil // swept meanwhile: look again
		}
	}
	if !c.Claimed {
		return c, nil, false, nil
	}
	ok = true
	s.mu.Lock()
	s.held[req.Key.ID] = req.Token
	s.mu.Unlock()
	t = &txn{store: s, conn: conn, locks: locks, req: req, key: req.Key, token: req.Token}
	t.tx = &Tx{tx: tx}
	return c, t, false, nil
}

// notStored is the executor's substitute for an outcome that cannot be
// stored (idem.NotStoredCode): its replay matches idem.ErrOutcomeNotStored.
func notStored() idem.Outcome {
	return idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: idem.NotStoredCode, ErrMessage: idem.ErrOutcomeNotStored.Error()}
}

// unlock releases the user-level locks of a transactional claim and returns
// the connection to the pool, or discards it when the locks may still be
// held (the statement failed).
func unlock(conn *sql.Conn, locks []string) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultLockTimeout)
	defer cancel()
	if _, err := conn.ExecContext(ctx, releaseLocks(locks)); err != nil {
		discard(conn)
		return
	}
	_ = conn.Close()
}

// discard closes conn's connection instead of returning it to the pool: the
// server then rolls back its transaction and releases its locks.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// Renew implements idem.Renewer. A claim held by one of this store's open
// transactions needs no lease (the transaction holds the key until it
// ends): Renew answers nil while the transaction is open. Any other record
// is renewed as in lease mode.
func (s *TxStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	s.mu.Lock()
	held, ok := s.held[key.ID]
	s.mu.Unlock()
	if ok && held == token {
		return nil
	}
	return s.Store.Renew(ctx, key, token, lease)
}

func (s *TxStore) unhold(key idem.Key, token idem.Token) {
	s.mu.Lock()
	if s.held[key.ID] == token {
		delete(s.held, key.ID)
	}
	s.mu.Unlock()
}

// txn is a claim held in an open transaction.
type txn struct {
	store  *TxStore
	conn   *sql.Conn
	tx     *Tx
	locks  []string
	req    idem.ClaimRequest
	key    idem.Key
	token  idem.Token
	done   atomic.Bool
	keeper // the final records of calls nested in this one (nest.go)
}

var errTxnDone = errors.New("mysqlstore: transaction already completed or released")

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

// Complete implements idem.Txn: it stores out in the claimed row, commits,
// and releases the key's locks. With discardWrites it first rolls the
// whole transaction back and, in a new one, under the key's lock still
// held, claims the key again and stores out: the record commits, the
// method's writes do not. When any step fails the transaction is rolled back: no
// record, no business write.
func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.token)
	if err := checkOutcome(t.key, out, ttl); err != nil {
		_ = t.tx.tx.Rollback()
		unlock(t.conn, t.locks)
		return err
	}
	if err := t.store.fits(ctx, t.tx.tx, t.key, out); err != nil {
		if !errors.Is(err, idem.ErrTooLarge) {
			_ = t.tx.tx.Rollback()
			discard(t.conn)
			return err
		}
		// Too large for the server: the executor's substitute stands in,
		// in this transaction, as it does in lease mode, so that retries
		// get idem.ErrOutcomeNotStored and never run the method again.
		out = notStored()
	}
	ctx, cancel := t.store.bounded(ctx, outcomeLen(out))
	defer cancel()
	tx := t.tx.tx
	err := func() error {
		if discardWrites {
			again, err := t.reclaim(ctx)
			if again != nil {
				tx = again // the one to roll back if a later step fails
			}
			if err != nil {
				return err
			}
		}
		res, err := t.store.exec1(ctx, tx, t.store.q.completeTx, completeArgs(t.key, t.token, out, ttl)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err == nil {
				// A deadlock or a lock wait timeout the method met
				// rolled the whole transaction back.
				err = errors.New("the claimed row is gone: the transaction was rolled back (a deadlock or a lock wait timeout in the method?)")
			}
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		_ = tx.Rollback()
		discard(t.conn) // the commit's fate or the locks may be unknown
		if tooLarge(err) {
			t.store.info.Store(nil) // the server's limit changed: read it again
		}
		if errNumber(err) == 0 && t.committed(ctx) {
			// The reply of the COMMIT (or of a statement before it)
			// was lost, but the outcome is committed.
			return nil
		}
		return fail("complete", t.key, err)
	}
	unlock(t.conn, t.locks)
	return nil
}

// reclaim rolls the call's transaction back (the method's writes and the
// claim) and claims the key again in a new transaction on the same
// connection, which still holds the key's lock, so that no other claim
// came between. It returns the new transaction, if it began, also with an
// error: nil when the session failed before it (a killed connection).
func (t *txn) reclaim(ctx context.Context) (*sql.Tx, error) {
	if err := t.tx.tx.Rollback(); err != nil {
		return nil, err
	}
	tx, err := t.conn.BeginTx(context.WithoutCancel(ctx), t.store.txOptions())
	if err != nil {
		return nil, err
	}
	r, ok, err := t.store.load(ctx, tx, t.store.q.load, t.key)
	if err != nil {
		return tx, err
	}
	c, res, err := t.store.decide(ctx, tx, t.req, r, ok)
	if err == nil && (res != claimDone || !c.Claimed) {
		err = errors.New("the key changed while its lock was held")
	}
	if err == nil {
		err = t.store.reapply(ctx, tx, t.kept)
	}
	return tx, err
}

// committed reports whether the call's outcome is committed: asked, after
// a failure the server did not answer, on another connection. A commit the
// server has not finished yet reads as not committed (the caller is told
// the call failed; its retry replays the outcome).
func (t *txn) committed(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultLockTimeout)
	defer cancel()
	n, err := t.store.count(ctx, t.store.q.completeChk, t.key.ID[:], int64(t.token))
	return err == nil && n > 0
}

// Release implements idem.Txn: it rolls the transaction back, claim and
// method writes alike, and releases the key's locks.
func (t *txn) Release(context.Context) error {
	if !t.end() {
		return errTxnDone
	}
	defer t.store.unhold(t.key, t.token)
	if err := t.tx.tx.Rollback(); err != nil {
		discard(t.conn)
		return nil // the server rolls back a closed connection's transaction
	}
	unlock(t.conn, t.locks)
	return nil
}

type txKey struct{}

// Tx is the transaction of an idempotent call, as its method sees it (see
// TxFrom). It has the methods of sqlc's DBTX (ExecContext, PrepareContext,
// QueryContext, QueryRowContext), so generated queries run on it. It has
// no Commit or Rollback: the executor ends the transaction, committing the
// method's writes with the outcome, or rolling them back. A statement run
// after the call is over fails with ErrTxOver.
type Tx struct {
	tx    *sql.Tx
	over  atomic.Bool
	units atomic.Uint64 // the savepoints BeginTx set in it
}

// ErrTxOver is returned by the statements of a Tx whose call is over.
var ErrTxOver = errors.New("mysqlstore: the idempotent call's transaction is over")

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.over.Load() {
		return nil, ErrTxOver
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.over.Load() {
		return nil, ErrTxOver
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the
// transaction. After the call is over its Scan fails with sql.ErrTxDone.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement in the transaction.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if t.over.Load() {
		return nil, ErrTxOver
	}
	return t.tx.PrepareContext(ctx, query)
}

// TxFrom returns the transaction of the idempotent call that ctx belongs
// to, inside a method run by an idem.Executor on a TxStore. Write the
// method's business rows through it, so that they commit with the outcome
// or not at all.
func TxFrom(ctx context.Context) (*Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*Tx)
	return tx, ok
}

var (
	_ idem.TxStore = (*TxStore)(nil)
	_ idem.Renewer = (*TxStore)(nil)
	_ idem.Txn     = (*txn)(nil)
)
