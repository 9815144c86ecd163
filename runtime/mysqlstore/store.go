package mysqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Schema is the SQL statement that creates the default table, idem_records,
// and its expiry index: the up migration of version 1 (see MigrationFiles).
// It is one statement, safe to run more than once.
//
//go:embed migrations/golang-migrate/0001_idem_records.up.sql
var Schema string

//go:embed migrations/golang-migrate/*.sql migrations/goose/*.sql
var migrationFiles embed.FS

// MigrationFiles returns the schema of the default table name as versioned
// migrations in golang-migrate's layout (0001_idem_records.up.sql and
// .down.sql: the table; 0002_idem_records_list_idx: the operators' listing
// index), plain SQL of one statement each, so that no tool needs
// multiStatements; the up files are Schema and ListIndexSchema, the
// statements Migrate runs. Use
// them with golang-migrate's iofs source or copy them
// (runtime/mysqlstore/migrations/golang-migrate in the source tree).
func MigrationFiles() fs.FS { return sub("migrations/golang-migrate") }

// GooseMigrationFiles returns the same migrations in goose's layout: one
// file per version holding "-- +goose Up", the up file, "-- +goose Down" and
// the down file, byte for byte (runtime/mysqlstore/migrations/goose).
func GooseMigrationFiles() fs.FS { return sub("migrations/goose") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(migrationFiles, dir)
	if err != nil {
		// Unreachable: dir is a constant directory of migrationFiles.
		panic(fmt.Sprintf("mysqlstore: migrations: %v", err))
	}
	return f
}

// DefaultTable is the table a store uses unless WithTable says otherwise.
const DefaultTable = "idem_records"

// DefaultSweepBatch is how many records one transaction of Sweep removes at
// most when Sweep is asked to remove them all (limit <= 0).
const DefaultSweepBatch = 1000

// DefaultLockTimeout is the WithLockTimeout default.
const DefaultLockTimeout = 5 * time.Second

// maxClaimAttempts bounds the retries of a claim whose row changed between
// its read and its write (a concurrent claim of the same key).
const maxClaimAttempts = 8

// Option configures a store.
type Option func(*config)

type config struct {
	table          string
	lockTimeout    time.Duration
	acquireTimeout time.Duration
}

// WithTable sets the table of the records (default "idem_records"), as
// "table" or "database.table". Each part must be a plain identifier:
// letters, digits and underscores, not starting with a digit, at most 64
// bytes (its index name, the table's name and "_expires_at_idx", too). It
// is quoted, never spliced. New panics on an invalid name.
func WithTable(name string) Option {
	return func(c *config) { c.table = name }
}

// WithLockTimeout bounds how long a statement that writes (a claim, Complete,
// Release, Renew, a transactional claim's own statements) waits, on the
// client, for the server's answer: a row lock held by another transaction
// is otherwise waited for until the server's innodb_lock_wait_timeout
// (50s by default). When it runs out the driver closes the connection and
// the call fails with a transient store error; nothing is executed twice
// (the executor's retry claims again). Default DefaultLockTimeout; d <= 0
// keeps the default.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// WithAcquireTimeout bounds, in transactional mode, how long ClaimTx waits
// for a connection of the pool when every one is in use (held by running
// calls, each for as long as its method runs) and its caller does not wait
// longer (wait 0); a caller that waits gets at least its wait. When no
// connection frees up in time, ClaimTx returns an error wrapping
// idem.ErrStoreBusy, which also matches idem.ErrStoreFull: nothing was
// claimed, the method did not run; retry shortly (idemhttp answers 503).
// Default DefaultAcquireTimeout; d <= 0 keeps the default.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) { c.acquireTimeout = d }
}

// DefaultAcquireTimeout is the WithAcquireTimeout default.
const DefaultAcquireTimeout = 250 * time.Millisecond

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// quoteTable validates name ("table" or "database.table") and returns it
// quoted, with the unquoted last part.
func quoteTable(name string) (quoted, last string, err error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", "", fmt.Errorf("mysqlstore: table name %q: at most database.table", name)
	}
	q := make([]string, len(parts))
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", "", fmt.Errorf("mysqlstore: table name %q: %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64 bytes)", name, p)
		}
		q[i] = "`" + p + "`"
	}
	last = parts[len(parts)-1]
	if len(last)+len(indexSuffix) > 64 {
		return "", "", fmt.Errorf("mysqlstore: table name %q: its index name %s%s is longer than 64 bytes", name, last, indexSuffix)
	}
	return strings.Join(q, "."), last, nil
}

const indexSuffix = "_expires_at_idx"

// Store is a MySQL or MariaDB idempotency store in lease mode; it implements
// idem.Store and idem.Renewer. It is safe for concurrent use.
type Store struct {
	db          *sql.DB
	stmts       sync.Map // query → *sql.Stmt: see prep
	table       string   // quoted
	name        string   // the table's unquoted last part
	lockTimeout time.Duration
	acquire     time.Duration
	q           queries

	warmMu sync.Mutex                 // serializes warm
	warmed atomic.Bool                // every statement is prepared: see warm
	info   atomic.Pointer[serverInfo] // what warm read of the server, or nil
}

// New returns a store in lease mode on db, a *sql.DB of the
// github.com/go-sql-driver/mysql driver. The table must exist: run Migrate
// once, or apply MigrationFiles with a migration tool. New panics if an
// option names an invalid table.
func New(db *sql.DB, opts ...Option) *Store {
	c := config{table: DefaultTable}
	for _, o := range opts {
		o(&c)
	}
	t, name, err := quoteTable(c.table)
	if err != nil {
		panic(err)
	}
	s := &Store{db: db, table: t, name: name, lockTimeout: c.lockTimeout, acquire: c.acquireTimeout}
	if s.lockTimeout <= 0 {
		s.lockTimeout = DefaultLockTimeout
	}
	if s.acquire <= 0 {
		s.acquire = DefaultAcquireTimeout
	}
	s.q = buildQueries(t)
	return s
}

// prep returns the statement q prepared on the store's database: the
// driver then sends one packet per execution and gets one reply, where an
// unprepared query with arguments costs a prepare, an execute and a close
// (unless the DSN sets interpolateParams). database/sql prepares it again
// on each connection that has not seen it. A statement whose table does not
// exist fails to prepare (an unmigrated database) and is not cached.
//
// prep takes a connection of the pool when q is not prepared yet: it is
// called only by a call that holds none (warm prepares every statement
// before a call takes its own connection; see on for a call that holds
// one).
func (s *Store) prep(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(q); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if old, loaded := s.stmts.LoadOrStore(q, st); loaded {
		_ = st.Close()
		return old.(*sql.Stmt), nil
	}
	return st, nil
}

// Close closes the statements the store prepared (not the database).
func (s *Store) Close() error {
	s.warmed.Store(false)
	s.stmts.Range(func(q, st any) bool {
		_ = st.(*sql.Stmt).Close()
		s.stmts.Delete(q)
		return true
	})
	return nil
}

// stmtQuerier runs a prepared statement, on the database or in a
// transaction.
type stmtQuerier struct {
	st *sql.Stmt
	tx *sql.Tx // nil: on the database
}

func (q stmtQuerier) QueryRowContext(ctx context.Context, _ string, args ...any) *sql.Row {
	st := q.st
	if q.tx != nil {
		st = q.tx.StmtContext(ctx, st)
	}
	return st.QueryRowContext(ctx, args...)
}

func (q stmtQuerier) ExecContext(ctx context.Context, _ string, args ...any) (sql.Result, error) {
	st := q.st
	if q.tx != nil {
		st = q.tx.StmtContext(ctx, st)
	}
	return st.ExecContext(ctx, args...)
}

// on returns a querier and execer that runs the prepared form of q on the
// database (tx nil) or in tx. In tx it never takes a second connection of
// the pool: a statement warm prepared is prepared on tx's own connection
// by (*sql.Tx).StmtContext, and one that drop closed since is prepared in
// tx (on its connection, closed when tx ends).
func (s *Store) on(ctx context.Context, tx *sql.Tx, q string) (stmtQuerier, error) {
	if tx != nil {
		if st, ok := s.stmts.Load(q); ok {
			return stmtQuerier{st: st.(*sql.Stmt), tx: tx}, nil
		}
		st, err := tx.PrepareContext(ctx, q)
		return stmtQuerier{st: st}, err
	}
	st, err := s.prep(ctx, q)
	return stmtQuerier{st: st, tx: tx}, err
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the quoted name of the store's table, as it appears in SQL.
func (s *Store) Table() string { return s.table }

// now is the server's clock, in microseconds since the Unix epoch, UTC: the
// start of the statement (NOW and UTC_TIMESTAMP are fixed per statement),
// independent of the session's time_zone.
const now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// queries are the store's statements for its table. Parameters are noted
// beside each.
type queries struct {
	load        string // key → the record's columns and now
	loadLocked  string // the same, FOR UPDATE
	insert      string // key, token, lease µs, TTL µs, scheme, fingerprint, tenant, op, key text
	replace     string // token, lease µs, TTL µs, scheme, fingerprint, tenant, op, key text, key: an expired row
	takeOver    string // token, lease µs, TTL µs, scheme, tenant, op, key text, key: a lapsed lease
	claimAgain  string // lease µs, key, token: the caller's own claim, repeated
	complete    string // status, body, code, message, meta, TTL µs, key, token
	completeTx  string // the same, without the expiry condition (the transaction holds the row)
	completeChk string // key, token → the token's final record exists
	release     string // key, token
	releaseChk  string // key → a live record exists
	renew       string // lease µs, key, token
	renewChk    string // key, token → the token's live PROCESSING record exists
	sweepPick   string // limit → keys of expired records, locked, skipping locked ones
	sweepDelete string // keys (expanded) → deleted, found by the primary key only
}

// prepared returns the statements warm prepares: all but Sweep's, whose
// DELETE has as many parameters as the batch has keys.
func (q *queries) prepared() []string {
	return []string{q.load, q.loadLocked, q.insert, q.replace, q.takeOver, q.claimAgain, q.complete,
		q.completeTx, q.completeChk, q.release, q.releaseChk, q.renew, q.renewChk}
}

func buildQueries(t string) queries {
	cols := "status, fingerprint, scheme, token, lease_until, expires_at, body, err_code, err_message, meta, " + now
	return queries{
		load:       "SELECT " + cols + " FROM " + t + " WHERE idem_key = ?",
		loadLocked: "SELECT " + cols + " FROM " + t + " WHERE idem_key = ? FOR UPDATE",
		insert: "INSERT INTO " + t + ` (idem_key, token, lease_until, expires_at, created_at, scheme, status,
	fingerprint, tenant, op, key_text) VALUES (?, ?, ` + now + ` + ?, ` + now + ` + ?, ` + now + `, ?, 1, ?, ?, ?, ?)`,
		replace: "UPDATE " + t + ` SET token = ?, lease_until = ` + now + ` + ?, expires_at = ` + now + ` + ?,
	created_at = ` + now + `, scheme = ?, status = 1, fingerprint = ?, tenant = ?, op = ?, key_text = ?,
	body = NULL, err_code = NULL, err_message = NULL, meta = NULL WHERE idem_key = ?`,
		takeOver: "UPDATE " + t + ` SET token = ?, lease_until = ` + now + ` + ?, expires_at = ` + now + ` + ?,
	scheme = ?, tenant = ?, op = ?, key_text = ? WHERE idem_key = ?`,
		claimAgain: "UPDATE " + t + " SET lease_until = LEAST(" + now + " + ?, expires_at) WHERE idem_key = ? AND token = ?",
		complete: "UPDATE " + t + ` SET status = ?, body = ?, err_code = ?, err_message = ?, meta = ?,
	lease_until = ` + now + `, expires_at = ` + now + ` + ? WHERE idem_key = ? AND token = ? AND status = 1 AND expires_at > ` + now,
		completeTx: "UPDATE " + t + ` SET status = ?, body = ?, err_code = ?, err_message = ?, meta = ?,
	lease_until = ` + now + `, expires_at = ` + now + ` + ? WHERE idem_key = ? AND token = ? AND status = 1`,
		completeChk: "SELECT COUNT(*) FROM " + t + " WHERE idem_key = ? AND token = ? AND status <> 1",
		release:     "DELETE FROM " + t + " WHERE idem_key = ? AND token = ? AND status = 1",
		releaseChk:  "SELECT COUNT(*) FROM " + t + " WHERE idem_key = ? AND expires_at > " + now,
		renew:       "UPDATE " + t + " SET lease_until = LEAST(" + now + " + ?, expires_at) WHERE idem_key = ? AND token = ? AND status = 1 AND expires_at > " + now,
		renewChk:    "SELECT COUNT(*) FROM " + t + " WHERE idem_key = ? AND token = ? AND status = 1 AND expires_at > " + now,
		sweepPick: "SELECT idem_key FROM " + t + " WHERE expires_at <= " + now +
			" ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED",
		// The rows are found by their primary key and nothing else: the
		// optimizer, left to itself, may scan the expiry index or the
		// whole table (a small table, or stale statistics), and a DELETE
		// that scans locks every row it meets, waiting for rows that
		// claims hold (see Sweep). The multiple-table form is the one both
		// MySQL and MariaDB accept an index hint in.
		sweepDelete: "DELETE r FROM " + t + " AS r FORCE INDEX (PRIMARY) WHERE r.expires_at <= " + now + " AND r.idem_key IN ",
	}
}

// fail wraps err in the store's convention: "mysqlstore: OP KEYHEX: err".
// The server's answer that the table or a column does not exist (a
// database never migrated, or migrated by an older release) also wraps
// idem.ErrStoreSchema and names the call that fixes it; a deadlock or a lock
// wait timeout is named as transient.
func fail(op string, key idem.Key, err error) error {
	if errNumber(err) == errBadField {
		// Migrate creates a table only when there is none (CREATE TABLE
		// IF NOT EXISTS): it never alters one made by hand or by another
		// release, so it is no fix for a missing column.
		return fmt.Errorf("mysqlstore: %s %s: %w: the table lacks a column the store needs (it was not made by Migrate or mysqlstore.MigrationFiles; Migrate does not alter an existing table): compare it with the store's MigrationSQL and alter it, or drop it and run Migrate: %w",
			op, key.Hex(), idem.ErrStoreSchema, err)
	}
	if schemaMissing(err) {
		return fmt.Errorf("mysqlstore: %s %s: %w: run the store's Migrate method (or apply mysqlstore.MigrationFiles) on this database: %w",
			op, key.Hex(), idem.ErrStoreSchema, err)
	}
	if transient(err) {
		return outage(fmt.Errorf("mysqlstore: %s %s: transient, nothing was decided: %w", op, key.Hex(), err))
	}
	return outage(fmt.Errorf("mysqlstore: %s %s: %w", op, key.Hex(), err)) // transient.go
}

// MySQL and MariaDB error numbers the store tells apart.
const (
	errDupEntry        = 1062 // ER_DUP_ENTRY
	errNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
	errBadField        = 1054 // ER_BAD_FIELD_ERROR
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK
)

func errNumber(err error) uint16 {
	if e, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return e.Number
	}
	return 0
}

func schemaMissing(err error) bool {
	n := errNumber(err)
	return n == errNoSuchTable || n == errBadField
}

// transient reports a deadlock or a lock wait timeout: the server rolled
// the statement (a deadlock: the whole transaction) back.
func transient(err error) bool {
	n := errNumber(err)
	return n == errDeadlock || n == errLockWaitTimeout
}

func duplicate(err error) bool { return errNumber(err) == errDupEntry }

func micros(d time.Duration) int64 { return d.Microseconds() }

// checkClaim is idem.CheckClaim, its error named by the store.
func checkClaim(req idem.ClaimRequest) error {
	if err := idem.CheckClaim(req); err != nil {
		return fail("claim", req.Key, err)
	}
	return nil
}

// checkOutcome is idem.CheckOutcome, its error named by the store.
func checkOutcome(key idem.Key, out idem.Outcome, ttl time.Duration) error {
	if err := idem.CheckOutcome(&out, ttl); err != nil {
		return fail("complete", key, err)
	}
	return nil
}

// completeArgs are the arguments of complete and completeTx. Body and Meta
// keep nil as NULL; ErrCode and ErrMessage are bytes as given.
func completeArgs(key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) []any {
	return []any{int64(out.Status), out.Body, []byte(out.ErrCode), []byte(out.ErrMessage), out.Meta,
		micros(ttl), key.ID[:], int64(token)}
}

// bytesOf returns s as a non-nil byte slice (a NOT NULL column's value even
// when s is empty).
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// row is a record as stored, with the server's now of the statement that
// read it.
type row struct {
	rec        idem.Record
	leaseUntil int64
	expiresAt  int64
	now        int64
}

// load reads the record of key with the statement q (load or loadLocked);
// ok is false when there is none.
func (s *Store) load(ctx context.Context, tx *sql.Tx, q string, key idem.Key) (r row, ok bool, err error) {
	var (
		status, scheme, token int64
		fp                    []byte
		body, code, msg, meta []byte
	)
	for range 2 {
		var db stmtQuerier
		if db, err = s.on(ctx, tx, q); err != nil {
			return row{}, false, err
		}
		err = db.QueryRowContext(ctx, q, key.ID[:]).Scan(&status, &fp, &scheme, &token, &r.leaseUntil, &r.expiresAt,
			&body, &code, &msg, &meta, &r.now)
		if !stmtClosed(err) {
			break
		}
	}
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
	return r, true, nil
}

// settled reports whether r answers a claim of req without a write: it is
// live, and neither takeable nor the caller's own claim. It sets the lease
// left of a PROCESSING record.
func settled(r *row, req idem.ClaimRequest) bool {
	if r.expiresAt <= r.now {
		return false // expired: absent
	}
	if r.rec.Status != idem.StatusProcessing {
		return true
	}
	if r.rec.Fingerprint == req.Fingerprint && (r.leaseUntil <= r.now || r.rec.Token == req.Token) {
		return false // a lapsed lease of this payload, or the caller's own claim
	}
	r.rec.LeaseLeft = max(time.Duration(r.leaseUntil-r.now)*time.Microsecond, 0)
	return true
}

// claimResult says what a claim attempt did.
type claimResult int

const (
	claimDone  claimResult = iota // answered: claimed, or a live record
	claimAgain                    // the row changed under the attempt: read it again
)

// claimArgs are the arguments of insert.
func claimArgs(req idem.ClaimRequest) []any {
	return []any{req.Key.ID[:], int64(req.Token), micros(req.Lease), micros(req.TTL), int64(req.Scheme),
		req.Fingerprint[:], bytesOf(req.Key.Tenant), bytesOf(req.Key.Op), bytesOf(req.Key.Text)}
}

// decide claims req given the row r (ok: it exists) read under the row's lock
// (or, in transactional mode, under the key's lock) in the transaction or
// connection x.
func (s *Store) decide(ctx context.Context, x execer, req idem.ClaimRequest, r row, ok bool) (idem.Claim, claimResult, error) {
	var (
		res sql.Result
		err error
		c   = idem.Claim{Claimed: true}
	)
	switch {
	case !ok:
		_, err = s.exec1(ctx, x, s.q.insert, claimArgs(req)...)
		if duplicate(err) {
			return idem.Claim{}, claimAgain, nil
		}
		return c, claimDone, err
	case settled(&r, req):
		return idem.Claim{Record: r.rec}, claimDone, nil
	case r.expiresAt <= r.now:
		res, err = s.exec1(ctx, x, s.q.replace, int64(req.Token), micros(req.Lease), micros(req.TTL), int64(req.Scheme),
			req.Fingerprint[:], bytesOf(req.Key.Tenant), bytesOf(req.Key.Op), bytesOf(req.Key.Text), req.Key.ID[:])
	case r.rec.Token == req.Token:
		// The caller's own claim, repeated after a lost reply: nobody
		// took it over, so its method has not started.
		_, err = s.exec1(ctx, x, s.q.claimAgain, micros(req.Lease), req.Key.ID[:], int64(req.Token))
		return c, claimDone, err
	default:
		c.TakenOver = true
		res, err = s.exec1(ctx, x, s.q.takeOver, int64(req.Token), micros(req.Lease), micros(req.TTL), int64(req.Scheme),
			bytesOf(req.Key.Tenant), bytesOf(req.Key.Op), bytesOf(req.Key.Text), req.Key.ID[:])
	}
	if err != nil {
		return idem.Claim{}, claimDone, err
	}
	// The token changes, so a row that is still there is always changed:
	// no row means a sweeper removed it since the read.
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return idem.Claim{}, claimAgain, err
	}
	return c, claimDone, nil
}

// exec1 runs q on x: prepared, on the database (x is s.db) or in a
// transaction (on its own connection: see on).
func (s *Store) exec1(ctx context.Context, x execer, q string, args ...any) (sql.Result, error) {
	var tx *sql.Tx
	switch x := x.(type) {
	case *sql.Tx:
		tx = x
	case *sql.DB:
	default:
		return x.ExecContext(ctx, q, args...)
	}
	for {
		st, err := s.on(ctx, tx, q)
		if err != nil {
			return nil, err
		}
		res, err := st.ExecContext(ctx, q, args...)
		if tx == nil && stmtClosed(err) {
			continue // dropped by another call meanwhile: prepared afresh
		}
		return res, err
	}
}

// bounded returns ctx bounded by the store's lock timeout, plus a second
// per MiB of the n bytes the statement sends (an outcome of
// idem.MaxOutcomeLen takes seconds to send and store).
func (s *Store) bounded(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.lockTimeout+time.Duration(n>>20)*time.Second)
}

func outcomeLen(out idem.Outcome) int { return idem.OutcomeLen(&out) }

// Claim implements idem.Store. It reads the key's record first, without a
// lock (one round trip): a live final record (a replay) or a live
// PROCESSING record the caller may not take answers at once. A key without
// a record is claimed by a plain INSERT (a second round trip; a concurrent
// claim of the same key makes it fail on the primary key, and the record
// is read again). A record to take over (expired, or a lapsed lease of the
// same payload) or the caller's own claim repeated (same token and
// payload: claimed again under a fresh lease, never beyond the record's
// expiry) is written in a short READ COMMITTED transaction under the row's
// lock. An attempt the server rolls back to break a deadlock (error 1213)
// decided nothing: the record is read again.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := checkClaim(req); err != nil {
		return idem.Claim{}, err
	}
	if err := s.warm(ctx); err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	for last := range maxClaimAttempts {
		r, ok, err := s.loadCommitted(ctx, req.Key)
		if err != nil {
			return idem.Claim{}, fail("claim", req.Key, err)
		}
		if ok && settled(&r, req) {
			return idem.Claim{Record: r.rec}, nil
		}
		var (
			c   idem.Claim
			res claimResult
		)
		if !ok {
			c, res, err = s.insert(ctx, req)
		} else {
			c, res, err = s.claimLocked(ctx, req)
		}
		if err != nil && (errNumber(err) != errDeadlock || last >= maxClaimAttempts-1) {
			return idem.Claim{}, fail("claim", req.Key, err)
		}
		if err == nil && res == claimDone {
			return c, nil
		}
		// The row changed under the attempt, or the server rolled the
		// attempt back to break a deadlock (nothing was decided): read
		// again.
	}
	return idem.Claim{}, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
}

func (s *Store) insert(ctx context.Context, req idem.ClaimRequest) (idem.Claim, claimResult, error) {
	ctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	return s.decide(ctx, s.db, req, row{}, false)
}

// claimLocked claims req in a READ COMMITTED transaction under the row's
// lock.
func (s *Store) claimLocked(ctx context.Context, req idem.ClaimRequest) (c idem.Claim, res claimResult, err error) {
	ctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return idem.Claim{}, claimDone, err
	}
	defer func() {
		if err != nil || res != claimDone || !c.Claimed {
			_ = tx.Rollback()
		}
	}()
	r, ok, err := s.load(ctx, tx, s.q.loadLocked, req.Key)
	if err != nil {
		return idem.Claim{}, claimDone, err
	}
	c, res, err = s.decide(ctx, tx, req, r, ok)
	if err != nil || res != claimDone || !c.Claimed {
		return c, res, err
	}
	if err = tx.Commit(); err != nil {
		return idem.Claim{}, claimDone, err
	}
	return c, claimDone, nil
}

// count runs a statement that returns one count, on the pool, reading
// committed rows only (see read).
func (s *Store) count(ctx context.Context, q string, args ...any) (n int64, err error) {
	err = s.read(ctx, func(tx *sql.Tx) error {
		st, err := s.on(ctx, tx, q)
		if err != nil {
			return err
		}
		return st.QueryRowContext(ctx, q, args...).Scan(&n)
	})
	return n, err
}

// read runs f, a read of committed rows, on the pool (tx nil), or, when
// the pool's sessions run at READ UNCOMMITTED, in a READ COMMITTED
// transaction of its own: a store read must never see a row that may not
// commit (an outcome written but not committed, a killed session's row
// being rolled back). At READ COMMITTED, REPEATABLE READ and SERIALIZABLE
// an autocommitted SELECT is a consistent read of committed rows, one
// round trip; at READ UNCOMMITTED it costs three more (the isolation, the
// BEGIN and the COMMIT).
func (s *Store) read(ctx context.Context, f func(tx *sql.Tx) error) error {
	info, err := s.server(ctx, s.db)
	if err != nil {
		return err
	}
	if !info.dirty {
		for {
			if err := f(nil); !stmtClosed(err) {
				return err
			}
		}
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// loadCommitted reads the committed record of key (see read).
func (s *Store) loadCommitted(ctx context.Context, key idem.Key) (r row, ok bool, err error) {
	info, err := s.server(ctx, s.db)
	if err != nil {
		return row{}, false, err
	}
	if !info.dirty {
		return s.load(ctx, nil, s.q.load, key) // no closure: a replay's path
	}
	err = s.read(ctx, func(tx *sql.Tx) error {
		r, ok, err = s.load(ctx, tx, s.q.load, key)
		return err
	})
	return r, ok, err
}

// Complete implements idem.Store: it stores out in the live PROCESSING
// record that holds token. When the record already holds token's own final
// outcome (a Complete repeated after a lost reply), it answers nil and
// changes nothing. Otherwise, when the record expired, is gone, or holds
// another token, it returns an error wrapping idem.ErrLeaseLost. An outcome
// larger than idem.MaxOutcomeLen is refused with idem.ErrTooLarge.
//
// An outcome longer than the server's max_allowed_packet allows (less a
// few KiB for the statement's other arguments) is refused the same way,
// before anything is sent: the executor then stores its small "outcome not
// stored" substitute, and retries get idem.ErrOutcomeNotStored, never a
// second run. A Complete that fails after it sent an outcome drops its
// prepared statement, so that neither the substitute nor a later call
// runs on a statement the server left failing (see drop).
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := checkOutcome(key, out, ttl); err != nil {
		return err
	}
	if err := s.warm(ctx); err != nil {
		return fail("complete", key, err)
	}
	if err := s.fits(ctx, s.db, key, out); err != nil {
		return err
	}
	n, err := s.exec(ctx, outcomeLen(out), s.q.complete, completeArgs(key, token, out, ttl)...)
	if err != nil {
		s.drop(s.q.complete)
		if tooLarge(err) {
			err = fmt.Errorf("%w: %w", idem.ErrTooLarge, err)
		}
		return fail("complete", key, err)
	}
	if n == 1 { // the status changes: a matched row is always changed
		return nil
	}
	done, err := s.count(ctx, s.q.completeChk, key.ID[:], int64(token))
	if err != nil {
		return fail("complete", key, err)
	}
	if done > 0 {
		return nil
	}
	return fail("complete", key, idem.ErrLeaseLost)
}

// exec runs a write bounded by the lock timeout and returns the rows it
// changed.
func (s *Store) exec(ctx context.Context, size int, q string, args ...any) (int64, error) {
	ctx, cancel := s.bounded(ctx, size)
	defer cancel()
	res, err := s.exec1(ctx, s.db, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Release implements idem.Store: it deletes the PROCESSING record that holds
// token. When there is no live record it answers nil (a Release repeated
// after a lost reply); a live record that is final or holds another token
// is left alone, with an error wrapping idem.ErrLeaseLost.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	n, err := s.exec(ctx, 0, s.q.release, key.ID[:], int64(token))
	if err != nil {
		return fail("release", key, err)
	}
	if n == 1 {
		return nil
	}
	live, err := s.count(ctx, s.q.releaseChk, key.ID[:])
	if err != nil {
		return fail("release", key, err)
	}
	if live > 0 {
		return fail("release", key, idem.ErrLeaseLost)
	}
	return nil
}

// Renew implements idem.Renewer: it sets the lease of the live PROCESSING
// record that holds token to lease from the server's now, never beyond the
// record's expiry, or returns an error wrapping idem.ErrLeaseLost when the
// record expired, is gone, final or holds another token.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return fail("renew", key, errors.New("lease must be positive"))
	}
	n, err := s.exec(ctx, 0, s.q.renew, micros(lease), key.ID[:], int64(token))
	if err != nil {
		return fail("renew", key, err)
	}
	if n == 1 {
		return nil
	}
	// MySQL counts changed rows, not matched ones: a lease already at the
	// record's expiry is matched and left unchanged.
	held, err := s.count(ctx, s.q.renewChk, key.ID[:], int64(token))
	if err != nil {
		return fail("renew", key, err)
	}
	if held == 0 {
		return fail("renew", key, idem.ErrLeaseLost)
	}
	return nil
}

// MigrationSQL returns Schema for this store's table name: the default
// names replaced by the configured (quoted) table and its index.
func (s *Store) MigrationSQL() string {
	if s.table == "`"+DefaultTable+"`" {
		return Schema
	}
	return strings.NewReplacer("idem_records_expires_at_idx", "`"+s.name+indexSuffix+"`",
		"idem_records_status_chk", "`"+s.name+"_status_chk`",
		"idem_records", s.table).Replace(Schema)
}

// Migrate creates the store's table and its indexes if they do not exist:
// the statements of the migration files, version 1 (MigrationSQL) and
// version 2 (ListIndexSQL, run only when the listing index is absent). It
// is idempotent and safe to call from several processes at once.
//
// It never alters a table that exists: a table made by hand that lacks a
// column (error 1054, unknown column, idem.ErrStoreSchema) stays so. A
// database Migrate set up adopts a migration tool by marking versions 1
// and 2 applied instead of running them (goose: insert versions 1 and 2
// into goose_db_version; golang-migrate: force 2): version 2's CREATE
// INDEX, without IF NOT EXISTS (MySQL has none), fails on the index
// Migrate made.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.MigrationSQL()); err != nil {
		return fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	if err := s.migrateListIndex(ctx); err != nil {
		return fmt.Errorf("mysqlstore: migrate: the listing index (version 2): %w", err)
	}
	return nil
}

// Sweep removes at most limit expired records and returns how many it
// removed; with limit <= 0 it removes every expired record,
// DefaultSweepBatch per transaction. A caller that sweeps in bounded steps
// calls it again while it returns limit. Each batch is a short READ
// COMMITTED transaction that follows the expiry index and skips rows locked
// by other transactions (FOR UPDATE SKIP LOCKED), then deletes the rows it
// locked, found by their primary key only, so sweepers wait on neither
// claims nor each other; it takes no gap lock. (A DELETE that found its
// rows through the expiry index waited for a row a claim held while it held
// that row's index entry, which the claim's takeover rewrites: a deadlock.)
func (s *Store) Sweep(ctx context.Context, limit int) (removed int, err error) {
	all := limit <= 0
	for all || removed < limit {
		n := DefaultSweepBatch
		if !all {
			n = min(n, limit-removed)
		}
		picked, deleted, err := s.sweepBatch(ctx, n)
		removed += deleted
		if err != nil {
			return removed, fmt.Errorf("mysqlstore: sweep: %w", err)
		}
		if picked < n {
			return removed, nil // no more rows due
		}
	}
	return removed, nil
}

func (s *Store) sweepBatch(ctx context.Context, n int) (picked, deleted int, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, s.q.sweepPick, n)
	if err != nil {
		return 0, 0, err
	}
	var keys []any
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			_ = rows.Close()
			return 0, 0, err
		}
		keys = append(keys, k)
	}
	if err := rows.Close(); err != nil {
		return 0, 0, err
	}
	if len(keys) == 0 {
		return 0, 0, nil
	}
	q := s.q.sweepDelete + "(?" + strings.Repeat(", ?", len(keys)-1) + ")"
	res, err := tx.ExecContext(ctx, q, keys...)
	if err != nil {
		return len(keys), 0, err
	}
	d, err := res.RowsAffected()
	if err != nil {
		return len(keys), 0, err
	}
	if err := tx.Commit(); err != nil {
		return len(keys), 0, err
	}
	return len(keys), int(d), nil
}

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Renewer = (*Store)(nil)
)
