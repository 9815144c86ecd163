package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Schema is the SQL that creates the table idem_records and its expiry
// index. It is safe to run more than once.
//
//go:embed schema.sql
var Schema string

// DefaultLockTimeout is how long a write waits for SQLite's write lock
// unless WithLockTimeout says otherwise; Open sets the connections'
// busy_timeout to it.
const DefaultLockTimeout = 5 * time.Second

// DefaultSweepBatch is how many records one transaction of Sweep removes at
// most, so that a large sweep does not hold the write lock for long.
const DefaultSweepBatch = 1000

// Option configures a store.
type Option func(*config)

type config struct {
	now         func() time.Time
	lockTimeout time.Duration
}

// WithClock sets the store's clock (default time.Now). Every lease and
// expiry instant the store writes or compares comes from it. Tests pass a
// fake clock to lapse leases and expire records without sleeping.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// WithLockTimeout bounds how long a store operation waits for the write
// lock held by another operation of this process (default
// DefaultLockTimeout; d <= 0 keeps the default). When it runs out, the
// operation fails with an error wrapping idem.ErrStoreFull, having written
// nothing. A write held by another process is waited for through the
// connection's busy_timeout (see Open).
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// Open opens (creating it if needed) the SQLite database file at path with
// the settings the store needs: WAL journal, synchronous=FULL (an outcome
// whose Complete returned survives a power loss, not only a process kill),
// busy_timeout of DefaultLockTimeout, and foreign keys on. path is a file
// name: not a URI, not ":memory:" (each pooled connection would get a
// database of its own), without '?' or '#'. The caller closes the
// returned *sql.DB.
func Open(path string) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("sqlitestore: open %q: the path must be a file name (not a URI, not :memory:, without '?' or '#')", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(DefaultLockTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	return db, nil
}

// Store is a SQLite idempotency store in lease mode; it implements
// idem.Store and idem.Renewer. It is safe for concurrent use.
type Store struct {
	db          *sql.DB
	now         func() time.Time
	lockTimeout time.Duration
	// gate is the write slot of this process: every write transaction
	// holds it, so that writers of one process queue here (bounded, and
	// cancellable) instead of in SQLite's busy handler.
	gate chan struct{}

	mu       sync.Mutex
	claiming map[[32]byte]chan struct{} // keys whose claim is in the write path, closed when it ends
}

// New returns a store in lease mode on db, a database opened with Open (or
// with equivalent settings: WAL, a busy_timeout; a pool of at least two
// connections, since replays read beside the writer). The table must exist: run
// Migrate once, or apply Schema with a migration tool. Use one store per
// database per process: the stores of one process share its write lock only
// through SQLite's busy_timeout.
func New(db *sql.DB, opts ...Option) *Store {
	c := config{now: time.Now, lockTimeout: DefaultLockTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.lockTimeout <= 0 {
		c.lockTimeout = DefaultLockTimeout
	}
	return &Store{db: db, now: c.now, lockTimeout: c.lockTimeout, gate: make(chan struct{}, 1),
		claiming: make(map[[32]byte]chan struct{})}
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// fail wraps err in the store's convention: "sqlitestore: OP KEYHEX: err".
// SQLite's answer that the table or a column the statement needs does not
// exist (a database never migrated, or migrated by an older release) also
// wraps idem.ErrStoreSchema and names the call that fixes it. An answer
// that can pass (see passing: a full disk, a lock held too long, an I/O
// error) is marked with idem.StoreOutage.
func fail(op string, key idem.Key, err error) error {
	if schemaMissing(err) {
		return fmt.Errorf("sqlitestore: %s %s: %w: run the store's Migrate method (or apply sqlitestore.Schema) on this database: %w",
			op, key.Hex(), idem.ErrStoreSchema, err)
	}
	return outage(fmt.Errorf("sqlitestore: %s %s: %w", op, key.Hex(), err))
}

// schemaMissing reports whether err is SQLite's answer that a table, a
// column or an index a statement names does not exist. SQLite tells them
// by message only (the code is the generic SQLITE_ERROR).
func schemaMissing(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) || e.Code() != sqlite3.SQLITE_ERROR {
		return false
	}
	msg := e.Error()
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column") ||
		strings.Contains(msg, "has no column named") || strings.Contains(msg, "no such index")
}

// errNested refuses a store operation from inside a transactional call of
// the same store: the transaction holds the write lock, which the operation
// would wait for until its own caller ends.
var errNested = errors.New("called inside a transactional call of the same store, whose transaction holds the write lock: call through the TxStore's own executor (a nested claim joins the transaction) or use another store")

// acquire takes the write slot of this process, waiting at most budget.
func (s *Store) acquire(ctx context.Context, budget time.Duration) error {
	if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.gate == s.gate && !t.ended() {
		return errNested
	}
	select {
	case s.gate <- struct{}{}:
		return nil
	default:
	}
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case s.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		// Busy, not broken: a Complete or a Release tries again (an outage),
		// a claim is refused at once (ErrStoreFull).
		return idem.StoreOutage(fmt.Errorf("the write lock was not free within %v: %w", budget, idem.ErrStoreFull))
	}
}

func (s *Store) releaseGate() { <-s.gate }

// begin takes the write slot and a connection in a BEGIN IMMEDIATE
// transaction (SQLite's write lock), waiting at most budget for the slot and
// the connection's busy_timeout for another process's writer.
func (s *Store) begin(ctx context.Context, budget time.Duration) (*sql.Conn, error) {
	if err := s.acquire(ctx, budget); err != nil {
		return nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		s.releaseGate()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		discard(conn)
		s.releaseGate()
		if busy(err) {
			err = fmt.Errorf("another process holds the write lock: %w (%w)", idem.ErrStoreFull, err)
		}
		return nil, err
	}
	return conn, nil
}

// finish commits (or, with a non-nil err, rolls back) the transaction of
// conn, returns conn to the pool and frees the write slot.
func (s *Store) finish(conn *sql.Conn, err error) error {
	defer s.releaseGate()
	if err == nil {
		if _, err = conn.ExecContext(context.Background(), "COMMIT"); err == nil {
			_ = conn.Close()
			return nil
		}
	}
	rollback(conn)
	return err
}

// rollback rolls back the transaction of conn and returns conn to the
// pool; a connection whose state is unknown is closed instead.
func rollback(conn *sql.Conn) {
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		discard(conn)
		return
	}
	_ = conn.Close()
}

// discard closes conn's underlying connection instead of returning it to
// the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// busy reports whether err is SQLite's SQLITE_BUSY (another connection
// holds the lock beyond busy_timeout).
func busy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// write runs fn in a write transaction and commits it unless fn fails.
func (s *Store) write(ctx context.Context, fn func(conn *sql.Conn, now int64) error) error {
	conn, err := s.begin(ctx, s.lockTimeout)
	if err != nil {
		return err
	}
	return s.finish(conn, fn(conn, s.now().UnixNano()))
}

// querier is what both *sql.DB and *sql.Conn offer.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const selectRecord = `SELECT status, fingerprint, scheme, token, lease_until, expires_at, body, err_code, err_message, meta
FROM idem_records WHERE key = ?`

// row is a record as stored.
type row struct {
	rec        idem.Record
	leaseUntil int64
	expiresAt  int64
}

// load reads the record of key; ok is false when there is none.
func load(ctx context.Context, q querier, key idem.Key) (r row, ok bool, err error) {
	var (
		status            int64
		fp                []byte
		scheme, token     int64
		body, code, msg   []byte
		meta              []byte
		leaseUntil, expAt int64
	)
	err = q.QueryRowContext(ctx, selectRecord, key.ID[:]).Scan(&status, &fp, &scheme, &token, &leaseUntil, &expAt, &body, &code, &msg, &meta)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	r.rec = idem.Record{Status: idem.Status(status), Scheme: uint32(scheme), Token: idem.Token(token)}
	copy(r.rec.Fingerprint[:], fp)
	if r.rec.Status != idem.StatusProcessing {
		r.rec.Outcome = idem.Outcome{Status: r.rec.Status, Body: body, ErrCode: string(code), ErrMessage: string(msg), Meta: meta}
	}
	r.leaseUntil, r.expiresAt = leaseUntil, expAt
	return r, true, nil
}

// settled reports whether r answers a claim of req at now without a write:
// r is live, and neither takeable nor the caller's own claim. It sets the
// lease left of a PROCESSING record.
func settled(r *row, req idem.ClaimRequest, now int64) bool {
	if r.expiresAt <= now {
		return false // expired: absent
	}
	if r.rec.Status != idem.StatusProcessing {
		return true
	}
	if r.rec.Fingerprint == req.Fingerprint && (r.leaseUntil <= now || r.rec.Token == req.Token) {
		return false // a lapsed lease of this payload, or the caller's own claim
	}
	r.rec.LeaseLeft = max(time.Duration(r.leaseUntil-now), 0)
	return true
}

const (
	insertClaim = `INSERT OR REPLACE INTO idem_records (key, token, lease_until, expires_at, created_at, scheme, status,
	fingerprint, tenant, op, key_text) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)`
	takeOver = `UPDATE idem_records SET token = ?, lease_until = ?, expires_at = ?, scheme = ?,
	tenant = ?, op = ?, key_text = ? WHERE key = ?`
	// claimAgain renews the lease of the caller's own claim, repeated after
	// a lost reply: nobody took the key over, so its method has not started
	// and may run under a fresh lease (never beyond the record's expiry).
	claimAgain = `UPDATE idem_records SET lease_until = min(?, expires_at) WHERE key = ? AND token = ?`
)

// claimIn claims req inside the write transaction of conn at now.
func claimIn(ctx context.Context, conn *sql.Conn, req idem.ClaimRequest, now int64) (idem.Claim, error) {
	r, ok, err := load(ctx, conn, req.Key)
	if err != nil {
		return idem.Claim{}, err
	}
	lease, exp := now+int64(req.Lease), now+int64(req.TTL)
	switch {
	case ok && settled(&r, req, now):
		return idem.Claim{Record: r.rec}, nil
	case ok && r.expiresAt > now && r.rec.Token == req.Token:
		_, err = conn.ExecContext(ctx, claimAgain, lease, req.Key.ID[:], int64(req.Token))
		return idem.Claim{Claimed: true}, err // the caller's own claim, repeated
	case ok && r.expiresAt > now:
		_, err = conn.ExecContext(ctx, takeOver, int64(req.Token), lease, exp, int64(req.Scheme),
			bytesOf(req.Key.Tenant), bytesOf(req.Key.Op), bytesOf(req.Key.Text), req.Key.ID[:])
		return idem.Claim{Claimed: true, TakenOver: true}, err
	}
	_, err = conn.ExecContext(ctx, insertClaim, req.Key.ID[:], int64(req.Token), lease, exp, now, int64(req.Scheme),
		req.Fingerprint[:], bytesOf(req.Key.Tenant), bytesOf(req.Key.Op), bytesOf(req.Key.Text))
	return idem.Claim{Claimed: true}, err
}

// bytesOf returns s as a non-nil byte slice (a NOT NULL column's value even
// when s is empty).
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

// Claim implements idem.Store. A live final record (a replay), or a live
// PROCESSING record the caller may not take, is answered from a read
// without the write lock; any other claim runs in a BEGIN IMMEDIATE
// transaction. A repeated Claim of the caller's own PROCESSING record (same
// token and payload) is claimed again, under a fresh lease.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	for {
		if c, ok, err := s.replay(ctx, req); err != nil || ok {
			return c, err
		}
		// One claim of a key at a time per process takes the write lock:
		// duplicates wait for it and then read what it committed, instead
		// of queueing on the lock behind each other.
		s.mu.Lock()
		busy, ok := s.claiming[req.Key.ID]
		if !ok {
			s.claiming[req.Key.ID] = make(chan struct{})
		}
		s.mu.Unlock()
		if !ok {
			break
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return idem.Claim{}, fail("claim", req.Key, ctx.Err())
		}
	}
	defer func() {
		s.mu.Lock()
		close(s.claiming[req.Key.ID])
		delete(s.claiming, req.Key.ID)
		s.mu.Unlock()
	}()
	var c idem.Claim
	err := s.write(ctx, func(conn *sql.Conn, now int64) (err error) {
		c, err = claimIn(ctx, conn, req, now)
		return err
	})
	if err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	return c, nil
}

// replay reads the record of req's key without the write lock, and answers
// the claim when the record settles it: it is live and final (a replay), or
// live, PROCESSING and not the caller's to take (a duplicate polling a
// running call). The claim then changes nothing, as it would under the
// lock, and writers are not kept waiting by readers.
func (s *Store) replay(ctx context.Context, req idem.ClaimRequest) (idem.Claim, bool, error) {
	r, ok, err := load(ctx, s.db, req.Key)
	if err != nil {
		return idem.Claim{}, false, fail("claim", req.Key, err)
	}
	if ok && settled(&r, req, s.now().UnixNano()) {
		return idem.Claim{Record: r.rec}, true, nil
	}
	return idem.Claim{}, false, nil
}

const (
	completeSQL = `UPDATE idem_records SET status = ?, body = ?, err_code = ?, err_message = ?, meta = ?,
	lease_until = ?, expires_at = ? WHERE key = ? AND token = ? AND status = 1 AND expires_at > ?`
	completeCheck = `SELECT EXISTS (SELECT 1 FROM idem_records WHERE key = ? AND token = ? AND status <> 1)`
	releaseSQL    = `DELETE FROM idem_records WHERE key = ? AND token = ? AND status = 1`
	releaseCheck  = `SELECT EXISTS (SELECT 1 FROM idem_records WHERE key = ? AND expires_at > ?)`
	renewSQL      = `UPDATE idem_records SET lease_until = min(? + ?, expires_at)
WHERE key = ? AND token = ? AND status = 1 AND expires_at > ?`
	sweepSQL = `DELETE FROM idem_records WHERE rowid IN
	(SELECT rowid FROM idem_records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`
)

// completeIn stores out in the PROCESSING record of token inside the write
// transaction of conn; updated is false when there was none.
func completeIn(ctx context.Context, conn *sql.Conn, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration, now int64) (updated bool, err error) {
	res, err := conn.ExecContext(ctx, completeSQL, int64(out.Status), out.Body, []byte(out.ErrCode), []byte(out.ErrMessage),
		out.Meta, now, now+int64(ttl), key.ID[:], int64(token), now)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Complete implements idem.Store: it stores out in the PROCESSING record that
// holds token. When the record already holds token's own final outcome (a
// repeated Complete), it answers nil and changes nothing. Otherwise, when the
// record expired, is gone, or holds another token, it returns an error
// wrapping idem.ErrLeaseLost. An outcome larger than idem.MaxOutcomeLen is
// refused with idem.ErrTooLarge.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := idem.CheckOutcome(&out, ttl); err != nil {
		return fail("complete", key, err)
	}
	err := s.write(ctx, func(conn *sql.Conn, now int64) error {
		ok, err := completeIn(ctx, conn, key, token, out, ttl, now)
		if err != nil || ok {
			return err
		}
		var done bool
		if err := conn.QueryRowContext(ctx, completeCheck, key.ID[:], int64(token)).Scan(&done); err != nil {
			return err
		}
		if !done {
			return idem.ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return fail("complete", key, err)
	}
	return nil
}

// Release implements idem.Store: it deletes the PROCESSING record that holds
// token. When there is no live record it answers nil (a repeated Release);
// a live record that is final or holds another token is left alone, with an
// error wrapping idem.ErrLeaseLost.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	err := s.write(ctx, func(conn *sql.Conn, now int64) error {
		res, err := conn.ExecContext(ctx, releaseSQL, key.ID[:], int64(token))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var live bool
		if err := conn.QueryRowContext(ctx, releaseCheck, key.ID[:], now).Scan(&live); err != nil {
			return err
		}
		if live {
			return idem.ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return fail("release", key, err)
	}
	return nil
}

// Renew implements idem.Renewer: it sets the lease of the PROCESSING record
// that holds token to lease from the store's now, never beyond the record's
// expiry, or returns an error wrapping idem.ErrLeaseLost when the record
// expired, is gone, final or holds another token.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return fail("renew", key, errors.New("lease must be positive"))
	}
	err := s.write(ctx, func(conn *sql.Conn, now int64) error {
		res, err := conn.ExecContext(ctx, renewSQL, now, int64(lease), key.ID[:], int64(token), now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n != 1 {
			err = idem.ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return fail("renew", key, err)
	}
	return nil
}

// Sweep removes at most limit expired records and returns how many it
// removed; with limit <= 0 it removes every expired record. Each
// transaction removes at most DefaultSweepBatch records, so a large sweep
// lets claims through between its batches. A caller that sweeps in bounded
// steps calls it again while it returns limit.
func (s *Store) Sweep(ctx context.Context, limit int) (removed int, err error) {
	all := limit <= 0
	for all || removed < limit {
		n := DefaultSweepBatch
		if !all {
			n = min(n, limit-removed)
		}
		var deleted int64
		err := s.write(ctx, func(conn *sql.Conn, now int64) error {
			res, err := conn.ExecContext(ctx, sweepSQL, now, n)
			if err != nil {
				return err
			}
			deleted, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return removed, fmt.Errorf("sqlitestore: sweep: %w", err)
		}
		removed += int(deleted)
		if int(deleted) < n {
			return removed, nil
		}
	}
	return removed, nil
}

// Migrate creates the table and its index if they do not exist, and puts
// the database in WAL mode. It is idempotent, and safe to call from several
// processes at once (it runs under the write lock).
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	err := s.write(ctx, func(conn *sql.Conn, _ int64) error {
		_, err := conn.ExecContext(ctx, Schema)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return nil
}

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Renewer = (*Store)(nil)
)
