package pgstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Schema is the SQL that creates the default table, idem_records, and its
// expiry index. It is safe to run more than once.
//
//go:embed schema.sql
var Schema string

// ArchiveSchema is the SQL that creates the default archive table,
// idem_records_archive (see WithArchive). Run it after Schema.
//
//go:embed archive.sql
var ArchiveSchema string

// DefaultTable is the table a store uses unless WithTable says otherwise.
const DefaultTable = "idem_records"

// DefaultSweepBatch is the batch size Sweep uses when given one <= 0.
const DefaultSweepBatch = 1000

// maxClaimAttempts bounds the retries of a claim statement that found a
// conflicting row its snapshot could not see (committed by a concurrent
// transaction after the statement started): the next statement sees it.
const maxClaimAttempts = 8

// Option configures a store.
type Option func(*config)

type config struct {
	table       string
	archive     string
	archiveSet  bool
	lockTimeout time.Duration
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// parseTable validates name as a table name, "table" or "schema.table", each
// part a plain SQL identifier (letters, digits, underscores; at most 63
// bytes; not starting with a digit), and returns its parts.
func parseTable(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("pgstore: table name %q: at most schema.table", name)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return nil, fmt.Errorf("pgstore: table name %q: %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", name, p)
		}
	}
	return pgx.Identifier(parts), nil
}

// WithTable sets the table of the records (default "idem_records"), as
// "table" or "schema.table". Each part must be a plain identifier: letters,
// digits and underscores, not starting with a digit, at most 63 bytes; it is
// quoted, never spliced. New panics on an invalid name.
func WithTable(name string) Option {
	return func(c *config) { c.table = name }
}

// WithArchive makes Sweep move expired rows into table (same columns plus
// archived_at) instead of deleting them, for audit. The name follows the
// rules of WithTable; Migrate creates the table.
func WithArchive(table string) Option {
	return func(c *config) { c.archive, c.archiveSet = table, true }
}

// WithLockTimeout bounds how long a lease-mode statement (Claim, Complete,
// Release) waits for a row lock held by another transaction: when d > 0 it
// is set with SET LOCAL lock_timeout in the same round trip (by default the
// server's setting applies, and waits are short, since every lease-mode
// statement commits at once; keep d well above a few milliseconds, as a
// statement may also wait briefly on the table's extension lock). In
// transactional mode it is also how long a duplicate waits for the key's lock
// when its caller asked not to wait (wait 0); default 1ms, the shortest
// lock_timeout PostgreSQL has, since 0 would mean "wait forever".
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// Store is a PostgreSQL idempotency store in lease mode; it implements
// idem.Store. It is safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	table       pgx.Identifier
	archive     pgx.Identifier
	lockTimeout time.Duration
	sql         statements
	// claimRetries counts claim statements run again because a concurrent
	// claim committed after the statement's snapshot (for tests).
	claimRetries atomic.Int64
}

type statements struct {
	claim, complete, release, sweep string
	claimTx, keyLock                string // transactional mode
	table, index, archive           string // sanitized identifiers
}

// New returns a store in lease mode on pool. The table must exist: run
// Migrate once, or apply Schema with a migration tool. New panics if an
// option names an invalid table.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	c := config{table: DefaultTable}
	for _, o := range opts {
		o(&c)
	}
	s := &Store{pool: pool, lockTimeout: c.lockTimeout}
	var err error
	if s.table, err = parseTable(c.table); err != nil {
		panic(err)
	}
	if c.archiveSet {
		if s.archive, err = parseTable(c.archive); err != nil {
			panic(err)
		}
	}
	s.sql = buildStatements(s.table, s.archive)
	return s
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Table returns the quoted name of the store's table, as it appears in SQL.
func (s *Store) Table() string { return s.sql.table }

// ts is the database clock of every instant the store writes or compares:
// the start of the current statement, so that a long transaction (in
// transactional mode) does not compute leases from its own start.
const ts = "statement_timestamp()"

// us turns a microsecond count parameter into an interval.
func us(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }

func buildStatements(table, archive pgx.Identifier) statements {
	t := table.Sanitize()
	idx := pgx.Identifier{truncIdent(table[len(table)-1] + "_expires_at_idx")}.Sanitize()
	st := statements{table: t, index: idx}
	// The record is takeable when it has expired, or when it is PROCESSING
	// with a lapsed lease and the same payload.
	takeable := func(r, fp string) string {
		return "(" + r + ".expires_at <= " + ts + " OR (" + r + ".status = 1 AND " + r + ".lease_until <= " + ts +
			" AND " + r + ".fingerprint = " + fp + "))"
	}
	// The lease left, as an interval by the database clock (one timestamp
	// subtraction; numeric arithmetic here cost a replay several µs of
	// executor time). scanClaim clamps it at 0 and uses it only for a
	// PROCESSING record.
	leaseLeft := "c.lease_until - " + ts
	// cur: the live record this statement's snapshot sees, unless it is
	// takeable. ins: when there is none, insert the claim; on a conflict (a
	// row the snapshot could not see, or a takeable one) take the row over
	// only if it is takeable, re-checked on its latest committed version
	// under the row lock. A fresh row and the replacement of an expired one
	// get created_at = now, a takeover keeps the original: taken_over.
	claim := `WITH cur AS (
	SELECT c.status, c.fingerprint, c.token, %[3]s AS lease_left,
		c.body, c.err_code, c.err_message, c.meta
	FROM %[1]s c
	WHERE c.tenant = $1::text AND c.op = $2::text AND c.key = $3::bytea
		AND c.expires_at > %[4]s AND NOT %[5]s
), ins AS (
	INSERT INTO %[1]s AS r (tenant, op, key, key_text, fingerprint, status, token,
		lease_until, created_at, updated_at, expires_at)
	SELECT $1::text, $2::text, $3::bytea, $4::text, $5::bytea, 1, $6::bigint,
		%[4]s + %[6]s, %[4]s, %[4]s, %[4]s + %[7]s
	WHERE NOT EXISTS (SELECT 1 FROM cur)%[2]s
	ON CONFLICT (tenant, op, key) DO UPDATE SET
		key_text = excluded.key_text, fingerprint = excluded.fingerprint, status = 1,
		token = excluded.token, lease_until = excluded.lease_until,
		body = NULL, err_code = NULL, err_message = NULL, meta = NULL,
		created_at = CASE WHEN r.expires_at <= %[4]s THEN %[4]s ELSE r.created_at END,
		updated_at = %[4]s, expires_at = excluded.expires_at
	WHERE %[8]s
	RETURNING r.created_at < %[4]s AS taken_over
)
SELECT true, ins.taken_over, 1::smallint, $5::bytea, $6::bigint, interval '0',
	NULL::bytea, ''::text, ''::text, NULL::bytea
FROM ins
UNION ALL
SELECT false, false, status, fingerprint, token, lease_left,
	body, coalesce(err_code, ''), coalesce(err_message, ''), meta
FROM cur`
	st.claim = fmt.Sprintf(claim, t, "", leaseLeft, ts, takeable("c", "$5::bytea"), us("$7"), us("$8"), takeable("r", "excluded.fingerprint"))
	// Transactional mode: the claim inserts (or takes over) only under the
	// key's advisory lock, which keyLock takes unless a final record is
	// visible (a replay needs no lock, and concurrent replays must not queue
	// on it). Without the lock and without a visible record (it expired in
	// between) the claim returns no row and runs again with the lock.
	st.claimTx = fmt.Sprintf(claim, t, "\n\t\tAND current_setting('idemgen.key_locked', true) = 'on'", leaseLeft, ts,
		takeable("c", "$5::bytea"), us("$7"), us("$8"), takeable("r", "excluded.fingerprint"))
	st.keyLock = fmt.Sprintf(`SELECT pg_advisory_xact_lock($1::bigint), set_config('idemgen.key_locked', 'on', true)
WHERE $5::bool OR NOT EXISTS (SELECT 1 FROM %[1]s WHERE tenant = $2::text AND op = $3::text AND key = $4::bytea
	AND status <> 1 AND expires_at > %[2]s)`, t, ts)
	st.complete = fmt.Sprintf(`UPDATE %[1]s SET status = $5::smallint, body = $6::bytea,
	err_code = $7::text, err_message = $8::text, meta = $9::bytea,
	lease_until = %[2]s, updated_at = %[2]s, expires_at = %[2]s + %[3]s
WHERE tenant = $1::text AND op = $2::text AND key = $3::bytea AND token = $4::bigint
	AND status = 1 AND expires_at > %[2]s`, t, ts, us("$10"))
	st.release = fmt.Sprintf(`DELETE FROM %[1]s
WHERE tenant = $1::text AND op = $2::text AND key = $3::bytea AND token = $4::bigint AND status = 1`, t)

	// Sweep: lock a bounded batch of expired rows, skipping rows another
	// transaction holds (a concurrent claim, another sweeper), and delete
	// them by ctid (a TID scan). The outer expires_at check re-runs on the
	// latest row version, so a row a claim refreshed meanwhile is kept.
	pick := fmt.Sprintf(`ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE expires_at <= %[2]s
	LIMIT $1::int FOR UPDATE SKIP LOCKED)) AND expires_at <= %[2]s`, t, ts)
	if archive == nil {
		st.sweep = fmt.Sprintf(`DELETE FROM %[1]s WHERE %[2]s`, t, pick)
	} else {
		a := archive.Sanitize()
		st.archive = a
		cols := "tenant, op, key, key_text, fingerprint, status, token, lease_until, body, err_code, err_message, meta, created_at, updated_at, expires_at"
		st.sweep = fmt.Sprintf(`WITH d AS (DELETE FROM %[1]s WHERE %[2]s RETURNING %[3]s)
INSERT INTO %[4]s (%[3]s, archived_at) SELECT %[3]s, %[5]s FROM d`, t, pick, cols, a, ts)
	}
	return st
}

// truncIdent cuts an identifier to PostgreSQL's 63 bytes (it is ASCII).
func truncIdent(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}

// micros turns d into whole microseconds, rounding up, so that a positive
// duration never becomes 0.
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// lockTimeoutValue is d as a lock_timeout setting: whole milliseconds, at
// least 1 (0 would disable the timeout).
func lockTimeoutValue(d time.Duration) string {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return strconv.FormatInt(max(ms, 1), 10) + "ms"
}

const setLockTimeout = "SELECT set_config('lock_timeout', $1::text, true)"

func claimArgs(req idem.ClaimRequest) []any {
	return []any{req.Key.Tenant, req.Key.Op, req.Key.ID[:], req.Key.Text, req.Fingerprint[:],
		int64(req.Token), micros(req.Lease), micros(req.TTL)}
}

// scanClaim reads the one row of the claim statement; ok is false when it
// returned none (a concurrent commit the snapshot missed: run it again).
func scanClaim(rows pgx.Rows) (c idem.Claim, ok bool, err error) {
	defer rows.Close()
	if !rows.Next() {
		return c, false, rows.Err()
	}
	var (
		status    int16
		fp        []byte
		token     int64
		leaseLeft pgtype.Interval
		out       idem.Outcome
	)
	if err := rows.Scan(&c.Claimed, &c.TakenOver, &status, &fp, &token, &leaseLeft,
		&out.Body, &out.ErrCode, &out.ErrMessage, &out.Meta); err != nil {
		return c, false, err
	}
	if rows.Next() {
		return c, false, errors.New("pgstore: claim returned more than one row")
	}
	if err := rows.Err(); err != nil {
		return c, false, err
	}
	if c.Claimed {
		return c, true, nil
	}
	rec := &c.Record
	rec.Status = idem.Status(status)
	copy(rec.Fingerprint[:], fp)
	rec.Token = idem.Token(token)
	if rec.Status == idem.StatusProcessing {
		left := time.Duration(leaseLeft.Microseconds)*time.Microsecond + time.Duration(leaseLeft.Days)*24*time.Hour
		rec.LeaseLeft = max(left, 0)
	} else {
		out.Status = rec.Status
		rec.Outcome = out
	}
	return c, true, nil
}

// Claim implements idem.Store: one statement that creates the PROCESSING
// record, takes over an expired record or a lapsed lease of the same
// payload, or returns the live record.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := checkClaim(req); err != nil {
		return idem.Claim{}, err
	}
	args := claimArgs(req)
	for range maxClaimAttempts {
		var rows pgx.Rows
		var err error
		if s.lockTimeout > 0 {
			b := &pgx.Batch{}
			b.Queue(setLockTimeout, lockTimeoutValue(s.lockTimeout))
			q := b.Queue(s.sql.claim, args...)
			var c idem.Claim
			var ok bool
			q.Query(func(r pgx.Rows) error {
				c, ok, err = scanClaim(r)
				return err
			})
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
				return idem.Claim{}, fmt.Errorf("pgstore: claim: %w", err)
			}
			if ok {
				return c, nil
			}
			s.claimRetries.Add(1)
			continue
		}
		rows, err = s.pool.Query(ctx, s.sql.claim, args...)
		if err != nil {
			return idem.Claim{}, fmt.Errorf("pgstore: claim: %w", err)
		}
		c, ok, err := scanClaim(rows)
		if err != nil {
			return idem.Claim{}, fmt.Errorf("pgstore: claim: %w", err)
		}
		if ok {
			return c, nil
		}
		s.claimRetries.Add(1)
	}
	return idem.Claim{}, errors.New("pgstore: claim: the record kept changing under concurrent claims")
}

func checkClaim(req idem.ClaimRequest) error {
	if req.TTL <= 0 {
		return errors.New("pgstore: claim: TTL must be positive")
	}
	if req.Lease < 0 || req.Lease > req.TTL {
		return errors.New("pgstore: claim: lease must be within 0..TTL")
	}
	return nil
}

func completeArgs(key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) ([]any, error) {
	if out.Status != idem.StatusSucceeded && out.Status != idem.StatusFailedFinal {
		return nil, fmt.Errorf("pgstore: complete: outcome status %v is not final", out.Status)
	}
	if ttl <= 0 {
		return nil, errors.New("pgstore: complete: TTL must be positive")
	}
	return []any{key.Tenant, key.Op, key.ID[:], int64(token), int16(out.Status), out.Body,
		out.ErrCode, out.ErrMessage, out.Meta, micros(ttl)}, nil
}

// exec runs one statement, with SET LOCAL lock_timeout in the same round trip
// when the store has a lock timeout.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if s.lockTimeout <= 0 {
		return s.pool.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(setLockTimeout, lockTimeoutValue(s.lockTimeout))
	var tag pgconn.CommandTag
	b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	err := s.pool.SendBatch(ctx, b).Close()
	return tag, err
}

// Complete implements idem.Store: it stores out in the PROCESSING record that
// holds token, or returns idem.ErrLeaseLost when the record expired, is
// final or holds another token.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	args, err := completeArgs(key, token, out, ttl)
	if err != nil {
		return err
	}
	tag, err := s.exec(ctx, s.sql.complete, args...)
	if err != nil {
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Release implements idem.Store: it deletes the PROCESSING record that holds
// token, or returns idem.ErrLeaseLost when the record is gone, final or
// holds another token.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	tag, err := s.exec(ctx, s.sql.release, key.Tenant, key.Op, key.ID[:], int64(token))
	if err != nil {
		return fmt.Errorf("pgstore: release: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return idem.ErrLeaseLost
	}
	return nil
}

// migrateLockID is the advisory lock key that serializes concurrent Migrate
// calls ("idemgen" in ASCII).
const migrateLockID int64 = 0x6964656d67656e

// MigrationSQL returns the schema for this store's table names: Schema, plus
// ArchiveSchema with WithArchive, with the default names replaced by the
// configured (quoted) ones.
func (s *Store) MigrationSQL() string {
	pairs := []string{"idem_records_expires_at_idx", s.sql.index}
	if s.archive != nil {
		pairs = append(pairs, "idem_records_archive", s.sql.archive)
	}
	pairs = append(pairs, "idem_records", s.sql.table)
	r := strings.NewReplacer(pairs...)
	sql := r.Replace(Schema)
	if s.archive != nil {
		sql += "\n" + r.Replace(ArchiveSchema)
	}
	return sql
}

// Migrate creates the store's table, index and (with WithArchive) archive
// table if they do not exist. It is idempotent and safe to call from several
// processes at once: a transaction-scoped advisory lock serializes them.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", migrateLockID); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	// No arguments: pgx sends the script with the simple protocol, which
	// runs several statements.
	if _, err := tx.Exec(ctx, s.MigrationSQL()); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// Sweep deletes expired records (or, with WithArchive, moves them to the
// archive table) in batches of at most batch rows (DefaultSweepBatch when
// batch <= 0), each its own short statement, until a batch comes back short
// or ctx is done. Rows locked by another transaction are skipped, so several
// sweepers, in one process or many, can run at once without waiting on each
// other or on claims. It returns how many rows it removed.
func (s *Store) Sweep(ctx context.Context, batch int) (deleted int, err error) {
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	for {
		tag, err := s.pool.Exec(ctx, s.sql.sweep, batch)
		if err != nil {
			return deleted, fmt.Errorf("pgstore: sweep: %w", err)
		}
		n := int(tag.RowsAffected())
		deleted += n
		if n < batch {
			return deleted, nil
		}
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
	}
}

var _ idem.Store = (*Store)(nil)
