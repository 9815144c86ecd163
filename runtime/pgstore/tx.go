package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TxStore is a PostgreSQL idempotency store in transactional mode; it
// implements idem.TxStore, so an idem.Executor on it runs the claim, the
// method and the outcome in one transaction. Its Store methods (Claim,
// Complete, Release, Renew, Migrate, Sweep) are those of lease mode, for
// callers that use the idem.Store contract directly, except that Renew of a
// claim held by one of this store's open transactions answers nil: the open
// transaction holds the key until it ends, so there is no lease to extend.
// It is safe for concurrent use.
type TxStore struct {
	*Store
	noWait time.Duration // lock_timeout of a claim whose caller does not wait
	open   sync.Map      // idem.Token -> [32]byte key ID, of claims held in open transactions
}

// NewTx returns a store in transactional mode on pool; the options are those
// of New. The table must exist (see Store.Migrate). NewTx panics if an
// option names an invalid table.
//
// It is a separate constructor, not an option of New, because the executor
// chooses transactional mode by the store's type (idem.TxStore).
func NewTx(pool *pgxpool.Pool, opts ...Option) *TxStore {
	s := New(pool, opts...)
	wait := s.lockTimeout
	if wait <= 0 {
		wait = time.Millisecond
	}
	return &TxStore{Store: s, noWait: wait}
}

// savepoint is set after the claim: a final error rolls the method's writes
// back to it and keeps the claim.
const (
	beginSQL      = "BEGIN"
	savepointSQL  = "SAVEPOINT idem_method"
	rollbackToSQL = "ROLLBACK TO SAVEPOINT idem_method"
	commitSQL     = "COMMIT"
	rollbackSQL   = "ROLLBACK"
	lockNotAvail  = "55P03" // lock_not_available: lock_timeout fired

	// invalidTextRepresentation is the code of the guard's failure, whose
	// message holds guardMarker.
	invalidTextRepresentation = "22P02"
	guardMarker               = "idemgen guard: key"
)

// keyLock is the transaction-scoped advisory lock that a claim holds on its
// key until it commits or rolls back: the first 8 bytes of the key's SHA-256
// (which covers tenant and operation). Keys of different stores of one
// database may share a lock (a duplicate then waits a little longer); an
// application's own advisory locks could collide only with probability
// 2^-64 per pair.
func keyLock(k idem.Key) int64 { return int64(binary.BigEndian.Uint64(k.ID[:8])) }

// payloadLock is the pair of int4 keys of the shared advisory lock that a
// claimer holds beside the key's lock: bytes 8 to 11 of the key ID (which
// payload locks of one key share), and the first 4 bytes of SHA-256(key ID,
// fingerprint). It names the payload of the transaction that holds the key,
// so that a duplicate that cannot wait longer tells "the same request is
// running" from "another payload holds this key" without seeing the
// uncommitted claim. (A two-int4 advisory lock never equals a bigint one:
// pg_locks tells them apart by objsubid.)
func payloadLock(k idem.Key, fp idem.Fingerprint) (int32, int32) {
	h := sha256.New()
	h.Write(k.ID[:])
	h.Write(fp[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return int32(binary.BigEndian.Uint32(k.ID[8:12])), int32(binary.BigEndian.Uint32(sum[:4]))
}

// ClaimTx implements idem.TxStore. It takes a connection from the pool;
// when all of them are in use, it waits at most wait or, when that is
// shorter, the store's acquire timeout (WithAcquireTimeout): when none frees
// up it returns an error wrapping idem.ErrStoreFull, having claimed nothing.
//
// Then, in one round trip, one batch reads the key's final record if one is
// visible (a replay, which takes no lock) or else takes the key's
// transaction-scoped advisory lock, waiting for what is left of wait
// (through lock_timeout; WithLockTimeout's value, default 1ms, when wait is
// 0), and runs a guard, the claim statement, a second guard, BEGIN and a
// savepoint. PostgreSQL runs a batch's statements as one transaction,
// implicit until BEGIN makes it explicit, keeping the lock and the claim
// (with the simple protocol too: one query string). When the key is
// claimed, the returned Txn owns that transaction and its connection, and
// the lock is held until it ends. When it is not (a replay, a live record,
// another payload), a guard fails on purpose (for a replay, the first: the
// claim statement does not run), so that the server rolls the implicit
// transaction back when the batch ends: a replay costs that one round
// trip, and no ROLLBACK (the server logs the guard's failure as an ERROR whose message
// starts with "invalid input syntax for type integer: "idemgen guard: key"
// and says it is not a failure).
//
// A duplicate of a call whose transaction is still open waits on that lock:
// when the transaction commits, the duplicate gets the committed record;
// when it rolls back, the duplicate claims the key. When the wait runs out
// first, the duplicate gets a PROCESSING record (which the executor reports
// as idem.ErrInProgress) if the holder runs the same payload, or, if it runs
// another payload, a PROCESSING record whose Fingerprint is not the
// duplicate's (the holder's is not visible; the executor reports
// idem.ErrPayloadMismatch, as every other store does): the holder's payload
// is known from the shared advisory lock it holds beside the key's, which
// costs no round trip to a call that claims or replays, and one more to a
// duplicate that times out. Only the lock wait runs under the short
// lock_timeout: the claim and the method's statements run under the
// connection's own setting.
//
// Use one mode per table: a lease-mode claim on a key that a transactional
// claim holds waits for that transaction (bounded only by the lease-mode
// store's WithLockTimeout).
func (s *TxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	if err := checkClaim(req); err != nil {
		return idem.Claim{}, nil, err
	}
	if s.part != nil {
		return s.claimTxPartitioned(ctx, req, wait)
	}
	conn, wait, err := s.acquireConn(ctx, wait)
	if err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	args := claimArgs(req)
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	timeout := lockTimeoutValue(wait)
	q, err := s.batchQueries(ctx, conn.Conn())
	if err != nil {
		end(ctx, conn)
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	sql, withSlow, force := q.fast, true, false
	for attempt := 1; ; attempt++ {
		var (
			claim, final idem.Claim
			res, fres    claimResult
		)
		b := &pgx.Batch{}
		// The batch's statements run in one transaction, implicit until
		// BEGIN makes it explicit (PostgreSQL runs what a pipeline sends
		// before its Sync as one transaction, and a BEGIN inside it keeps
		// what ran before): the key lock, the claim and the guard are
		// part of the method's transaction. pgx's Tx for it comes from
		// Batch.BeginTx, whose begin query is here the key lock.
		b.BeginTx(pgx.TxOptions{BeginQuery: q.keyLock})
		b.QueuedQueries[0].Arguments = []any{keyLock(req.Key), req.Key.ID[:], force, pa, pb, timeout}
		b.QueuedQueries[0].Query(func(rows pgx.Rows) error {
			var err error
			final, fres, err = scanClaim(rows, false)
			return err
		})
		b.Queue(q.finalGuard, req.Key.ID[:])
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var err error
			claim, res, err = scanClaim(rows, withSlow)
			return err
		})
		b.Queue(q.guard, req.Key.ID[:])
		b.Queue(q.begin)
		b.Queue(q.savepoint)
		br := conn.SendBatch(ctx, b)
		tx := br.Tx()
		err = br.Close()
		if isGuard(err) {
			// Not claimed: a guard failed the implicit transaction,
			// which PostgreSQL rolled back at the end of the batch.
			err = nil
			if fres == claimAnswered {
				claim, res = final, fres // keyLock found the final record
			}
			if res == claimAnswered && claim.Claimed {
				err = errors.New("the guard failed a claimed transaction")
			}
		}
		if err != nil || res == claimAnswered {
			return s.claimed(ctx, conn, tx, req, claim, err)
		}
		// claimAgain: a conflicting row was committed after the claim's
		// snapshot was taken (by a lease-mode writer), or the claim ran
		// without the key's lock. claimSlow: the row is takeable, or is
		// this caller's own claim. Either way: the full claim, under the
		// key's lock (force), in a new batch (the guard ended this one's
		// transaction).
		if res == claimAgain {
			s.claimRetries.Add(1)
		}
		if attempt >= maxClaimAttempts {
			end(ctx, conn)
			return idem.Claim{}, nil, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
		}
		sql, withSlow, force = q.claim, false, true
	}
}

// txQueries are the statements of ClaimTx's batch: their SQL, or the names
// of their prepared statements.
type txQueries struct{ keyLock, finalGuard, fast, claim, guard, begin, savepoint string }

func (q txQueries) all() []string {
	return []string{q.keyLock, q.finalGuard, q.fast, q.claim, q.guard, q.begin, q.savepoint}
}

// names returns the names ClaimTx prepares q's statements under: idemgen_
// and 24 hex digits of the SHA-256 of the SQL.
func (q txQueries) names() txQueries {
	n := func(sql string) string {
		sum := sha256.Sum256([]byte(sql))
		return "idemgen_" + hex.EncodeToString(sum[:12])
	}
	return txQueries{n(q.keyLock), n(q.finalGuard), n(q.fast), n(q.claim), n(q.guard), n(q.begin), n(q.savepoint)}
}

// batchQueries returns what ClaimTx's batch queues on c: with pgx's default
// QueryExecModeCacheStatement, the names of the statements, prepared on the
// connection's first use of them (one round trip each, once); in the other
// modes (chosen for poolers that keep no prepared statements), their SQL.
// They are prepared by name because pgx drops every statement of a batch
// that failed from its statement cache (and prepares it again on its next
// use, one more round trip), and a replay's batch fails on purpose (a
// guard); statements prepared by name are not in that cache. (With
// QueryExecModeCacheDescribe, the description cache is dropped likewise: a
// call after a replay on the same connection describes its statements
// again.)
func (s *TxStore) batchQueries(ctx context.Context, c *pgx.Conn) (txQueries, error) {
	if c.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return s.sql.txText, nil
	}
	names, sqls := s.sql.txNames.all(), s.sql.txText.all()
	for i, name := range names {
		if _, err := c.Prepare(ctx, name, sqls[i]); err != nil {
			return txQueries{}, err
		}
	}
	return s.sql.txNames, nil
}

// isGuard reports whether err is the guard's failure (see buildStatements).
func isGuard(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == invalidTextRepresentation && strings.Contains(pgErr.Message, guardMarker)
}

// acquireConn takes a connection from the pool for a claim and returns
// what is left of the claim's wait for the key's lock (the store's no-wait
// timeout when wait is 0). When every connection of the pool is in use
// (held by running calls), it waits for one at most max(wait, the store's
// acquire timeout), then fails with an error wrapping idem.ErrStoreFull;
// while the pool may still open a connection, only ctx bounds the wait
// (opening one takes as long as it takes, and a full pool is what makes a
// duplicate hang).
func (s *TxStore) acquireConn(ctx context.Context, wait time.Duration) (*pgxpool.Conn, time.Duration, error) {
	start := time.Now()
	var conn *pgxpool.Conn
	var err error
	if st := s.pool.Stat(); st.AcquiredConns()+st.ConstructingConns() < st.MaxConns() {
		conn, err = s.pool.Acquire(ctx)
	} else {
		actx, cancel := context.WithTimeout(ctx, max(wait, s.acquire))
		conn, err = s.pool.Acquire(actx)
		cancel()
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			st := s.pool.Stat()
			err = fmt.Errorf("no connection of the pool (%d of %d in use) freed up within %v: %w",
				st.AcquiredConns(), st.MaxConns(), max(wait, s.acquire), idem.ErrStoreFull)
		}
		return nil, 0, err
	}
	if wait > 0 {
		return conn, max(wait-time.Since(start), time.Millisecond), nil
	}
	return conn, s.noWait, nil
}

// claimed ends a claim batch of either layout: a lock wait that ran out is
// answered by heldBy, another error or an answer that is not a claim ends
// the connection's transaction and releases it, and a claim becomes the
// caller's open transaction tx.
func (s *TxStore) claimed(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, req idem.ClaimRequest, claim idem.Claim, err error) (idem.Claim, idem.Txn, error) {
	if err != nil {
		if pgErr, isPg := errors.AsType[*pgconn.PgError](err); isPg && pgErr.Code == lockNotAvail {
			// Another transaction holds the key and did not finish in time.
			return s.heldBy(ctx, conn, req), nil, nil
		}
		end(ctx, conn)
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	if !claim.Claimed {
		end(ctx, conn)
		return claim, nil, nil
	}
	t := &txn{store: s, conn: conn, key: req.Key, token: req.Token}
	t.mtx = &methodTx{Tx: tx, owner: t}
	s.open.Store(req.Token, req.Key.ID)
	return claim, t, nil
}

// heldBy answers a duplicate whose wait for the key's lock ran out: it asks pg_locks whether the session holding the
// key holds the duplicate's payload lock too. The answer is a PROCESSING
// record with the duplicate's fingerprint (the same request is running, or
// the holder just finished) or, when the holder runs another payload, with a
// fingerprint that differs from it.
func (s *TxStore) heldBy(ctx context.Context, conn *pgxpool.Conn, req idem.ClaimRequest) idem.Claim {
	defer conn.Release()
	c := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
	// The lock wait failed the batch's implicit transaction, which ended
	// with the batch; a transaction still open is rolled back first.
	if conn.Conn().PgConn().TxStatus() != 'I' {
		if _, err := conn.Exec(ctx, rollbackSQL); err != nil {
			return c
		}
	}
	return s.holder(ctx, conn.Conn(), req)
}

// batcher is what holder needs of a connection or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// holder is heldBy's answer, asked on db (a connection in no transaction,
// or a transaction that holds no lock of the key).
func (s *TxStore) holder(ctx context.Context, db batcher, req idem.ClaimRequest) idem.Claim {
	c := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
	k := uint64(keyLock(req.Key))
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	var held, same, other bool
	var (
		rec   idem.Claim
		final bool
	)
	// In this order: the holder's locks, then the final record. A holder
	// seen with another payload's lock that is about to find a final record
	// (committed before, and then visible here) and roll back does not
	// make a duplicate of that record's payload a mismatch.
	b := &pgx.Batch{}
	b.Queue(s.sql.holder, int64(k>>32), int64(uint32(k)), int64(uint32(pa)), int64(uint32(pb))).QueryRow(func(r pgx.Row) error {
		return r.Scan(&held, &same, &other)
	})
	b.Queue(s.sql.final, req.Key.ID[:]).Query(func(rows pgx.Rows) error {
		var err error
		var res claimResult
		rec, res, err = scanClaim(rows, false)
		final = res == claimAnswered
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return c
	}
	if final {
		return rec
	}
	// A holder that is ending releases its locks one by one: only one seen
	// holding another payload's lock of this key is running another
	// payload; one seen with neither is taken as the same request.
	if held && !same && other {
		for i := range c.Record.Fingerprint {
			c.Record.Fingerprint[i] ^= 0xff
		}
	}
	return c
}

// Renew implements idem.Renewer. A claim held by one of this store's open
// transactions needs no lease (the transaction holds the key until it
// ends): Renew answers nil while the transaction is open. Any other record
// is renewed as in lease mode.
func (s *TxStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if id, ok := s.open.Load(token); ok && id.([32]byte) == key.ID {
		return nil
	}
	return s.Store.Renew(ctx, key, token, lease)
}

// end rolls back whatever transaction conn is in and returns it to the pool
// (which closes it if the rollback failed).
func end(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		_, _ = conn.Exec(ctx, rollbackSQL)
	}
	conn.Release()
}

// txn is a claim held in an open transaction.
type txn struct {
	store *TxStore
	conn  *pgxpool.Conn
	mtx   *methodTx
	key   idem.Key
	token idem.Token
	done  atomic.Bool
}

var errTxnDone = errors.New("transaction already completed or released")

// Context implements idem.Txn: ctx carrying the transaction for TxFrom.
func (t *txn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.mtx)
}

// Complete implements idem.Txn: in one round trip it rolls back to the
// savepoint (with discardWrites), stores out in the claimed row and commits.
func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("complete", t.key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	t.store.open.Delete(t.token)
	args, err := completeArgs(t.key, t.token, out, ttl)
	if err != nil {
		end(ctx, t.conn)
		return err
	}
	b := &pgx.Batch{}
	if discardWrites {
		b.Queue(rollbackToSQL)
	}
	var updated, committed bool
	t.store.queuePlanGeneric(b)
	b.Queue(t.store.sql.complete, args...).Exec(func(ct pgconn.CommandTag) error {
		updated = ct.RowsAffected() == 1
		if !updated {
			return errors.New("the claimed row is gone")
		}
		return nil
	})
	b.Queue(commitSQL).Exec(func(ct pgconn.CommandTag) error {
		committed = ct.String() == commitSQL
		if !committed {
			return errors.New("the transaction was aborted (a statement of the method failed and was ignored?) and rolled back")
		}
		return nil
	})
	err = t.conn.SendBatch(ctx, b).Close()
	end(ctx, t.conn)
	if err != nil && uncertain(err) && t.store.committed(ctx, t.key, t.token) {
		// The COMMIT was sent and its reply lost, but it committed.
		return nil
	}
	if err != nil {
		return fail("complete", t.key, err)
	}
	return nil
}

// committed reports whether the key's record holds token's final outcome,
// once no transaction writes the key any more: it resolves a COMMIT whose
// reply was lost. It asks on a connection of its own and a context detached
// from the caller's, bounded by settleTimeout; when it cannot tell, it
// answers false (the caller is told the call failed; a retry replays the
// outcome if it did commit).
func (s *Store) committed(ctx context.Context, key idem.Key, token idem.Token) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.settle, key.ID[:])
	b.Queue("ROLLBACK")
	var done bool
	b.Queue(s.sql.completeCheck, key.ID[:], int64(token)).QueryRow(func(r pgx.Row) error { return r.Scan(&done) })
	return s.pool.SendBatch(ctx, b).Close() == nil && done
}

// Release implements idem.Txn: it rolls the transaction back, claim and
// method writes alike. A connection that is already broken needs no
// rollback: the server rolls its transaction back and commits nothing.
func (t *txn) Release(ctx context.Context) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("release", t.key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	t.store.open.Delete(t.token)
	defer t.conn.Release()
	if t.conn.Conn().IsClosed() {
		return nil
	}
	if _, err := t.conn.Exec(ctx, rollbackSQL); err != nil {
		if t.conn.Conn().IsClosed() {
			return nil
		}
		return fail("release", t.key, err)
	}
	return nil
}

type txKey struct{}

// TxFrom returns the transaction of the idempotent call that ctx belongs to,
// inside a method run by an idem.Executor on a TxStore. Write the method's
// business rows through it, so that they commit with the outcome or not at
// all. The executor ends the transaction: Commit and Rollback of the returned
// Tx return ErrTxOwned (use Begin for a nested savepoint, or BeginTx, which
// also covers the case with no claim), and the Tx is closed
// (pgx.ErrTxClosed) once the call is over.
func TxFrom(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*methodTx)
	return tx, ok
}

// ErrTxOwned is returned by Commit and Rollback of the transaction TxFrom
// returns: the executor commits it with the outcome, or rolls it back when the
// method returns a transient error.
var ErrTxOwned = errors.New("pgstore: the idempotency transaction is ended by the executor: return from the method instead")

// methodTx is the transaction as the method sees it: every pgx.Tx method but
// Commit and Rollback, until the call is over.
type methodTx struct {
	pgx.Tx
	owner  *txn
	closed atomic.Bool
}

func (m *methodTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Begin(ctx)
}

func (m *methodTx) Commit(context.Context) error   { return ErrTxOwned }
func (m *methodTx) Rollback(context.Context) error { return ErrTxOwned }

func (m *methodTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if m.closed.Load() {
		return 0, pgx.ErrTxClosed
	}
	return m.Tx.CopyFrom(ctx, table, cols, src)
}

func (m *methodTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if m.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return m.Tx.SendBatch(ctx, b)
}

func (m *methodTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Prepare(ctx, name, sql)
}

func (m *methodTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if m.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return m.Tx.Exec(ctx, sql, args...)
}

func (m *methodTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Query(ctx, sql, args...)
}

func (m *methodTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if m.closed.Load() {
		return errRow{pgx.ErrTxClosed}
	}
	return m.Tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var (
	_ idem.TxStore = (*TxStore)(nil)
	_ idem.Renewer = (*TxStore)(nil)
	_ idem.Txn     = (*txn)(nil)
	_ pgx.Tx       = (*methodTx)(nil)
)
