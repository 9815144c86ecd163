package pgstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
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
// sweep index: the up migration of version 1 (see MigrationFiles). It is safe
// to run more than once.
//
//go:embed migrations/golang-migrate/0001_idem_records.up.sql
var Schema string

// ArchiveSchema is the SQL that creates the default archive table,
// idem_records_archive (see WithArchive): the up migration of version 2. Run
// it after Schema.
//
//go:embed migrations/golang-migrate/0002_idem_records_archive.up.sql
var ArchiveSchema string

// ListSchema is the SQL that creates the index of the operators' listing
// (idem.AdminStore.List) on the default table: the up migration of version
// 3. Migrate runs it after Schema.
//
//go:embed migrations/golang-migrate/0003_idem_records_list_idx.up.sql
var ListSchema string

// DefaultTable is the table a store uses unless WithTable says otherwise.
const DefaultTable = "idem_records"

// DefaultSweepBatch is how many records one statement of Sweep removes at
// most when Sweep is asked to remove them all (limit <= 0).
const DefaultSweepBatch = 1000

// maxClaimAttempts bounds the retries of a claim statement that found a
// conflicting row its snapshot could not see (committed by a concurrent
// transaction after the statement started): the next statement sees it.
const maxClaimAttempts = 8

// settleTimeout bounds the clean-up of a claim whose reply did not arrive
// (see Claim); it runs on a context detached from the caller's.
const settleTimeout = 5 * time.Second

// Option configures a store.
type Option func(*config)

type config struct {
	table          string
	archive        string
	archiveSet     bool
	lockTimeout    time.Duration
	acquireTimeout time.Duration
	partitions     time.Duration // WithPartitions
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
// quoted, never spliced. New panics on an invalid name. The names of the
// table's index are derived from it and always fit PostgreSQL's 63 bytes
// (a long table name gets a hash-suffixed index name, see MigrationSQL).
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
// Release, Renew) waits for a row lock held by another transaction: when
// d > 0 it is set with SET LOCAL lock_timeout in the same round trip (by
// default the server's setting applies, and waits are short, since every
// lease-mode statement commits at once; keep d well above a few
// milliseconds, as a statement may also wait briefly on the table's
// extension lock). A transactional claim never waits for the key's lock
// (it tries it), so this does not bound it.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// WithAcquireTimeout bounds, in transactional mode, how long ClaimTx waits
// for a free connection of the pool when its caller does not wait (wait 0);
// a caller that waits gets at least its wait. Every transactional call holds
// a connection while its method runs, so a pool held by running calls would
// otherwise make a call hang instead of answering (duplicates of a call
// this store runs take no connection: see TxStore.ClaimTx). When no
// connection frees up in time, ClaimTx returns an error wrapping
// idem.ErrStoreBusy, which also matches idem.ErrStoreFull (nothing was
// claimed, the method did not run; retry shortly). Default
// DefaultAcquireTimeout; d <= 0 keeps the default.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) { c.acquireTimeout = d }
}

// DefaultAcquireTimeout is the WithAcquireTimeout default.
const DefaultAcquireTimeout = 250 * time.Millisecond

// Store is a PostgreSQL idempotency store in lease mode; it implements
// idem.Store and idem.Renewer. It is safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	table       pgx.Identifier
	archive     pgx.Identifier
	lockTimeout time.Duration
	acquire     time.Duration
	sql         statements
	part        *partitioning // nil in plain mode (see WithPartitions)
	finals      finals        // keys last seen final (plain mode; see finals)
	// claimRetries counts claim statements run again because a concurrent
	// claim committed after the statement's snapshot (for tests).
	claimRetries atomic.Int64
	// describedArgs: the pool's statements are described, so that
	// claimArgs may pass claimParams (read once by New: pgxpool.Pool.Config
	// copies the whole configuration).
	describedArgs bool
}

type statements struct {
	claim, complete, completeCheck, release, releaseCheck, renew, settle, sweep string
	fast                                                                        string // lease mode's first claim statement
	final                                                                       string // a hinted claim's read (see finals)
	claimTx, fastTx, decide                                                     string // transactional mode
	// txNames: the statements of ClaimTx's batch by the names ClaimTx
	// prepares them under on each connection (see TxStore.batchQueries).
	txNames, txText       txQueries
	nestText              txQueries // ClaimNested's (see claimNestedOnce)
	reapply               string    // a kept nested final record written again (see keptFinal)
	table, index, archive string    // sanitized identifiers
	indexName             string    // unquoted
}

// New returns a store in lease mode on pool. The table must exist: run
// Migrate once, or apply Schema with a migration tool. New panics if an
// option names an invalid table.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	c := config{table: DefaultTable}
	for _, o := range opts {
		o(&c)
	}
	s := &Store{pool: pool, lockTimeout: c.lockTimeout, acquire: c.acquireTimeout}
	if pool != nil { // nil only in tests of the options
		mode := pool.Config().ConnConfig.DefaultQueryExecMode
		s.describedArgs = mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
	}
	if s.acquire <= 0 {
		s.acquire = DefaultAcquireTimeout
	}
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
	if c.partitions != 0 {
		s.part = newPartitioning(c.partitions, s.table)
		s.sql = buildPartitionStatements(s.table, s.archive, c.partitions)
	} else {
		s.finals = newFinals()
	}
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

// derivedIdent returns base+suffix as an identifier of at most 63 bytes:
// when it is longer, base is cut and followed by 8 hex digits of its
// SHA-256, so that two long table names never share an index name and
// PostgreSQL never truncates one (which made a 63-byte table name's
// CREATE INDEX IF NOT EXISTS match the table itself and create nothing).
func derivedIdent(base, suffix string) string {
	if len(base)+len(suffix) <= 63 {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(base))
	tag := "_" + hex.EncodeToString(sum[:4])
	return base[:63-len(suffix)-len(tag)] + tag + suffix
}

// Parameters of the lease-mode statements: $1 key ID, $2 token; the claim
// adds $3 tenant, $4 op, $5 key text, $6 fingerprint, $7 lease µs, $8 TTL µs,
// $9 scheme.
func buildStatements(table, archive pgx.Identifier) statements {
	t := table.Sanitize()
	name := derivedIdent(table[len(table)-1], "_sweep_at_idx")
	st := statements{table: t, index: pgx.Identifier{name}.Sanitize(), indexName: name}
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
	// get created_at = now, a takeover keeps the original: taken_over. own:
	// a live PROCESSING record that holds this very token and payload is
	// this caller's own claim, repeated after a lost reply: claimed again,
	// under a fresh lease (never beyond the record's expiry), lapsed or not,
	// since nobody took it over and its method has not started.
	claim := `WITH own AS (
	UPDATE %[1]s o SET lease_until = LEAST(%[4]s + %[6]s, o.expires_at)
	WHERE o.key = $1::bytea AND o.token = $2::bigint AND o.status = 1 AND o.fingerprint = $6::bytea
		AND o.expires_at > %[4]s
	RETURNING true
), cur AS (
	SELECT c.status, c.fingerprint, c.scheme, c.token, %[3]s AS lease_left,
		c.body, c.err_code, c.err_message, c.meta
	FROM %[1]s c
	WHERE c.key = $1::bytea AND c.expires_at > %[4]s AND NOT %[5]s
		AND NOT (c.status = 1 AND c.token = $2::bigint AND c.fingerprint = $6::bytea)
), ins AS (
	INSERT INTO %[1]s AS r (key, tenant, op, key_text, fingerprint, scheme, status, token,
		lease_until, created_at, expires_at, sweep_at)
	SELECT $1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $9::int, 1, $2::bigint,
		%[4]s + %[6]s, %[4]s, %[4]s + %[7]s, %[4]s + %[7]s
	WHERE NOT EXISTS (SELECT 1 FROM cur) AND NOT EXISTS (SELECT 1 FROM own)%[2]s
	ON CONFLICT (key) DO UPDATE SET
		tenant = excluded.tenant, op = excluded.op, key_text = excluded.key_text,
		fingerprint = excluded.fingerprint, scheme = excluded.scheme, status = 1,
		token = excluded.token, lease_until = excluded.lease_until,
		body = NULL, err_code = NULL, err_message = NULL, meta = NULL,
		created_at = CASE WHEN r.expires_at <= %[4]s THEN %[4]s ELSE r.created_at END,
		expires_at = excluded.expires_at, sweep_at = excluded.sweep_at
	WHERE %[8]s
	RETURNING r.created_at < %[4]s AS taken_over
)
SELECT %[9]s, ins.taken_over, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea
FROM ins
UNION ALL
SELECT %[9]s, false, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea
FROM own
UNION ALL
SELECT status = 1 AND token = $2::bigint AND fingerprint = $6::bytea, false, status, fingerprint,
	scheme, token, lease_left, body, err_code, err_message, meta
FROM cur`
	st.claim = fmt.Sprintf(claim, t, "", leaseLeft, ts, takeable("c", "$6::bytea"), us("$7"), us("$8"),
		takeable("r", "excluded.fingerprint"), "true")
	// fast is the claim statement a call runs first: one index probe for
	// the key's row and, when there is none, a plain insert. It answers
	// alone for the usual cases, a fresh key (claimed) and a live record
	// (returned: a replay, a mismatch, a call in progress), with the
	// columns of claim and a twelfth, slow. It writes nothing when a row
	// exists, and never updates: when the row is takeable (expired, or a
	// lapsed lease of the same payload) or is this caller's own claim
	// repeated, it returns slow = true and the caller runs claim, the
	// statement that takes over and renews. No row at all means a
	// conflicting row committed after the statement's snapshot (the insert
	// did nothing): the caller runs claim too, whose next snapshot sees it.
	fast := `WITH cur AS (
	SELECT c.status, c.fingerprint, c.scheme, c.token, %[3]s AS lease_left,
		c.body, c.err_code, c.err_message, c.meta,
		%[5]s OR (c.status = 1 AND c.token = $2::bigint AND c.fingerprint = $6::bytea) AS slow
	FROM %[1]s c
	WHERE c.key = $1::bytea%[2]s
), ins AS (
	INSERT INTO %[1]s (key, tenant, op, key_text, fingerprint, scheme, status, token,
		lease_until, created_at, expires_at, sweep_at)
	SELECT $1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $9::int, 1, $2::bigint,
		%[4]s + %[6]s, %[4]s, %[4]s + %[7]s, %[4]s + %[7]s
	WHERE NOT EXISTS (SELECT 1 FROM cur)%[2]s
	ON CONFLICT (key) DO NOTHING
	RETURNING 1
)
SELECT %[8]s, false, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea, false
FROM ins
UNION ALL
SELECT false, false, status, fingerprint, scheme, token, lease_left, body, err_code, err_message, meta, slow
FROM cur`
	st.fast = fmt.Sprintf(fast, t, "", leaseLeft, ts, takeable("c", "$6::bytea"), us("$7"), us("$8"), "true")
	st.final = finalSQL(t)
	// Transactional mode: the claim inserts (or takes over) only under the
	// key's advisory lock, which decide takes (see decideSQL), and reads
	// nothing without it: a replay or a duplicate answered by decide costs
	// the claim statement no scan (a one-time filter).
	locked := "\n\t\tAND current_setting('idemgen.key_locked', true) IN ('on', 'fresh')"
	st.claimTx = fmt.Sprintf(claim, t, locked, leaseLeft, ts,
		takeable("c", "$6::bytea"), us("$7"), us("$8"), takeable("r", "excluded.fingerprint"), "true")
	st.fastTx = fmt.Sprintf(fast, t, locked, leaseLeft, ts, takeable("c", "$6::bytea"), us("$7"), us("$8"), "true")
	st.decide = decideSQL(t, "c.expires_at > "+ts)
	// ClaimTx's batch on the plain table: probe (decide's answers in one
	// plain statement, and whether the key has a row at all) and, for a key
	// with no row, a plain insert; the full claim statement for the rest.
	st.txText = txQueries{decide: probeSQL(t), fast: insertSQL(t), claim: st.claimTx, begin: beginSQL, savepoint: savepointSQL}
	st.txNames = st.txText.names()
	// A claim nested in a caller's transaction runs decide and the fast
	// claim statement (see claimNestedOnce).
	st.nestText = txQueries{decide: st.decide, fast: st.fastTx, claim: st.claimTx, begin: beginSQL, savepoint: savepointSQL}
	// reapply writes a nested call's final record again after an
	// enclosing call's final error rolled its method's writes back (see
	// keptFinal), under the key's lock held across that rollback: into a
	// row that is absent, expired or a lapsed claim, never over a live one.
	// $1 key, $2 token, $3 tenant, $4 op, $5 key text, $6 fingerprint,
	// $7 scheme, $8 status, $9 body, $10 code, $11 message, $12 meta,
	// $13 TTL µs.
	st.reapply = fmt.Sprintf(`INSERT INTO %[1]s AS r (key, tenant, op, key_text, fingerprint, scheme, status, token,
	body, err_code, err_message, meta, lease_until, created_at, expires_at, sweep_at)
VALUES ($1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $7::int, $8::smallint, $2::bigint,
	$9::bytea, $10::bytea, $11::bytea, $12::bytea, %[2]s, %[2]s, %[2]s + %[3]s, %[2]s + %[3]s)
ON CONFLICT (key) DO UPDATE SET
	tenant = excluded.tenant, op = excluded.op, key_text = excluded.key_text,
	fingerprint = excluded.fingerprint, scheme = excluded.scheme, status = excluded.status,
	token = excluded.token, body = excluded.body, err_code = excluded.err_code,
	err_message = excluded.err_message, meta = excluded.meta, lease_until = excluded.lease_until,
	created_at = excluded.created_at, expires_at = excluded.expires_at, sweep_at = excluded.sweep_at
WHERE r.expires_at <= %[2]s OR (r.status = 1 AND r.lease_until <= %[2]s)`, t, ts, us("$13"))
	// Complete: $3 status, $4 body, $5 code, $6 message, $7 meta, $8 TTL µs.
	// sweep_at only ever moves earlier here (an outcome that expires sooner
	// than the claim), so the usual Complete changes no indexed column.
	st.complete = fmt.Sprintf(`UPDATE %[1]s SET status = $3::smallint, body = $4::bytea,
	err_code = $5::bytea, err_message = $6::bytea, meta = $7::bytea,
	lease_until = %[2]s, expires_at = %[2]s + %[3]s, sweep_at = LEAST(sweep_at, %[2]s + %[3]s)
WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > %[2]s`, t, ts, us("$8"))
	// completeCheck runs when Complete changed nothing, as a new statement
	// (it sees what committed meanwhile): is the token's outcome stored?
	st.completeCheck = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s WHERE key = $1::bytea AND token = $2::bigint AND status <> 1)`, t)
	st.release = fmt.Sprintf(`DELETE FROM %[1]s WHERE key = $1::bytea AND token = $2::bigint AND status = 1`, t)
	// releaseCheck: after a Release that deleted nothing, is there a live
	// record (another token's, or a final one)?
	st.releaseCheck = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s WHERE key = $1::bytea AND expires_at > %[2]s)`, t, ts)
	// Renew: $3 lease µs, never beyond the record's expiry.
	st.renew = fmt.Sprintf(`UPDATE %[1]s SET lease_until = LEAST(%[2]s + %[3]s, expires_at)
WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > %[2]s`, t, ts, us("$3"))
	// settle waits until no other transaction is writing the key (an
	// INSERT … ON CONFLICT waits for an uncommitted row of the same key),
	// inside a transaction the caller rolls back, so nothing is written.
	st.settle = fmt.Sprintf(`INSERT INTO %[1]s (key, tenant, op, fingerprint, status, token, lease_until, expires_at, sweep_at)
VALUES ($1::bytea, '', '', $1::bytea, 1, 0, %[2]s, %[2]s, %[2]s) ON CONFLICT (key) DO NOTHING`, t, ts)

	// Sweep: lock at most $1 rows due for a look, oldest first, skipping
	// rows another transaction holds (a concurrent claim, another
	// sweeper). Expired ones are deleted by ctid (a TID scan); live ones (an
	// outcome stored after its claim, whose expiry is later) get sweep_at =
	// expires_at and are not looked at again before they expire.
	cols := "key, token, lease_until, expires_at, sweep_at, created_at, scheme, status, fingerprint, tenant, op, key_text, body, err_code, err_message, meta"
	returning, archiveCTE := "1", ""
	if archive != nil {
		a := archive.Sanitize()
		st.archive = a
		returning = cols
		archiveCTE = fmt.Sprintf(`, a AS (
	INSERT INTO %[1]s (%[2]s, archived_at) SELECT %[2]s, %[3]s FROM d
)`, a, cols, ts)
	}
	st.sweep = fmt.Sprintf(`WITH c AS MATERIALIZED (
	SELECT ctid, expires_at <= %[2]s AS dead FROM %[1]s WHERE sweep_at <= %[2]s
	ORDER BY sweep_at LIMIT $1::int FOR UPDATE SKIP LOCKED
), d AS (
	DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM c WHERE dead)) AND expires_at <= %[2]s
	RETURNING %[3]s
), b AS (
	UPDATE %[1]s SET sweep_at = expires_at WHERE ctid = ANY(ARRAY(SELECT ctid FROM c WHERE NOT dead))
	RETURNING 1
)%[4]s
SELECT (SELECT count(*) FROM d)::int, (SELECT count(*) FROM b)::int`, t, ts, returning, archiveCTE)
	return st
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

// fail wraps err in the store's convention: "pgstore: OP KEYHEX: err". A
// server's answer that the table, a column or an index the statement needs
// does not exist (a table never migrated, or migrated by an older release)
// also wraps idem.ErrStoreSchema and names the call that fixes it. An
// answer that can pass (see passing: a read-only standby, a shutdown, too
// many connections, a full disk) is marked with idem.StoreOutage.
func fail(op string, key idem.Key, err error) error {
	if schemaMissing(err) {
		return fmt.Errorf("pgstore: %s %s: %w: run the store's Migrate method (or apply pgstore's migrations) on this database: %w",
			op, key.Hex(), idem.ErrStoreSchema, err)
	}
	err = fmt.Errorf("pgstore: %s %s: %w", op, key.Hex(), err)
	if passing(err) {
		return idem.StoreOutage(err)
	}
	return err
}

// schemaMissing reports whether err is the server's answer that an object
// the statement names does not exist: undefined_table (42P01),
// undefined_column (42703), undefined_object (42704), or no unique index for
// ON CONFLICT (42P10), as a table of an older layout answers.
func schemaMissing(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return false
	}
	switch pgErr.Code {
	case "42P01", "42703", "42704", "42P10":
		return true
	}
	return false
}

// claimArgs returns the parameters of the claim statements for req: $1
// key ID, $2 token, $3 tenant, $4 operation, $5 key text, $6 fingerprint,
// $7 lease and $8 TTL in microseconds, $9 scheme. On a pool whose
// statements are described (every QueryExecMode but Exec and
// SimpleProtocol, whose parameters have no known type), they are
// claimParams: two allocations, where the values boxed one by one cost
// one each.
func (s *Store) claimArgs(req idem.ClaimRequest) []any {
	if !s.describedArgs {
		return []any{req.Key.ID[:], int64(req.Token), []byte(req.Key.Tenant), []byte(req.Key.Op), []byte(req.Key.Text),
			req.Fingerprint[:], micros(req.Lease), micros(req.TTL), int32(req.Scheme)}
	}
	p := &claimParams{id: req.Key.ID[:], fp: req.Fingerprint[:],
		token: argInt(req.Token), lease: argInt(micros(req.Lease)), ttl: argInt(micros(req.TTL)), scheme: argInt(int32(req.Scheme))}
	t, o, x := req.Key.Tenant, req.Key.Op, req.Key.Text
	buf := make([]byte, 0, len(t)+len(o)+len(x)) // never nil: an empty one is '', not NULL
	buf = append(append(append(buf, t...), o...), x...)
	p.tenant, p.op, p.text = buf[:len(t):len(t)], buf[len(t):len(t)+len(o):len(t)+len(o)], buf[len(t)+len(o):]
	p.args = [9]any{&p.id, &p.token, &p.tenant, &p.op, &p.text, &p.fp, &p.lease, &p.ttl, &p.scheme}
	return p.args[:]
}

// claimParams are claimArgs' parameters on a pool whose statements are
// described: pgx encodes each through its codec's valuer interface
// (pgtype.BytesValuer, pgtype.Int64Valuer), by pointer, so that passing
// them boxes nothing.
type claimParams struct {
	id, tenant, op, text, fp  argBytes
	token, lease, ttl, scheme argInt
	args                      [9]any
}

// argBytes is a bytea parameter passed by pointer (see claimParams).
type argBytes []byte

// BytesValue implements pgtype.BytesValuer.
func (b *argBytes) BytesValue() ([]byte, error) { return *b, nil }

// argInt is an integer parameter passed by pointer (see claimParams).
type argInt int64

// Int64Value implements pgtype.Int64Valuer.
func (i *argInt) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*i), Valid: true}, nil
}

// claimResult is what a claim statement's reply says.
type claimResult int

const (
	// claimAnswered: the reply is the answer (claimed, or the live record).
	claimAnswered claimResult = iota
	// claimAgain: no row; a conflicting row was committed after the
	// statement's snapshot: run the full claim statement, whose snapshot
	// sees it.
	claimAgain
	// claimSlow: the fast statement found a row that the full claim
	// statement must handle (takeover, the caller's own claim repeated).
	claimSlow
)

// scanClaim reads the one row of a claim statement: claim and claimTx
// (eleven columns), or fast and fastTx (withSlow: a twelfth, slow).
func scanClaim(rows pgx.Rows, withSlow bool) (c idem.Claim, res claimResult, err error) {
	if !withSlow {
		c, res, _, err = scanClaimRow(rows, 0)
		return c, res, err
	}
	c, res, slow, err := scanClaimRow(rows, rawBool)
	if err == nil && res == claimAnswered && slow != 0 {
		return idem.Claim{}, claimSlow, nil
	}
	return c, res, err
}

// scanClaimRow reads the one row of the claim's eleven columns and, when
// extra is not 0, a twelfth of that kind (rawBool: 1 for true; rawInt2),
// returned in x; no row is claimAgain. A row in binary format of the
// expected types is decoded raw (see rawValues), any other is scanned.
func scanClaimRow(rows pgx.Rows, extra rawKind) (c idem.Claim, res claimResult, x int64, err error) {
	defer rows.Close()
	if !rows.Next() {
		return c, claimAgain, 0, rows.Err()
	}
	kinds := claimKinds
	switch extra {
	case rawBool:
		kinds = claimSlowKinds
	case rawInt2:
		kinds = claimBusyKinds
	}
	if v, ok := rawValues(rows, kinds); ok {
		if c, err = rawClaimRow(v); err == nil && extra != 0 {
			switch xv := v[11]; {
			case xv == nil:
				err = errRawNull
			case extra == rawBool:
				x = int64(xv[0])
			default:
				x = int64(rawInt16(xv))
			}
		}
		if err != nil {
			return idem.Claim{}, claimAgain, 0, err
		}
	} else if c, x, err = scanClaimColumns(rows, extra); err != nil {
		return idem.Claim{}, claimAgain, 0, err
	}
	if rows.Next() {
		return idem.Claim{}, claimAgain, 0, errors.New("claim returned more than one row")
	}
	if err := rows.Err(); err != nil {
		return idem.Claim{}, claimAgain, 0, err
	}
	if c.Claimed {
		return idem.Claim{Claimed: true, TakenOver: c.TakenOver}, claimAnswered, x, nil
	}
	return c, claimAnswered, x, nil
}

// scanClaimColumns is scanClaimRow's read of a row that is not decoded
// raw: Rows.Scan.
func scanClaimColumns(rows pgx.Rows, extra rawKind) (c idem.Claim, x int64, err error) {
	var (
		status    int16
		fp        []byte
		scheme    int32
		token     int64
		leaseLeft pgtype.Interval
		code, msg []byte
		out       idem.Outcome
		slow      bool
		busy      int16
	)
	dst := []any{&c.Claimed, &c.TakenOver, &status, &fp, &scheme, &token, &leaseLeft,
		&out.Body, &code, &msg, &out.Meta}
	switch extra {
	case rawBool:
		dst = append(dst, &slow)
	case rawInt2:
		dst = append(dst, &busy)
	}
	if err := rows.Scan(dst...); err != nil {
		return c, 0, err
	}
	if slow {
		x = 1
	}
	if extra == rawInt2 {
		x = int64(busy)
	}
	if c.Claimed {
		return c, x, nil
	}
	c.Record = record(status, fp, scheme, token, out, code, msg)
	if c.Record.Status == idem.StatusProcessing {
		left := time.Duration(leaseLeft.Microseconds)*time.Microsecond + time.Duration(leaseLeft.Days)*24*time.Hour
		c.Record.LeaseLeft = max(left, 0)
	}
	return c, x, nil
}

// record builds a record from its columns as the statements return them:
// out holds the body and meta; a final record's outcome gets its status,
// code and message.
func record(status int16, fp []byte, scheme int32, token int64, out idem.Outcome, code, msg []byte) idem.Record {
	rec := idem.Record{Status: idem.Status(status), Scheme: uint32(scheme), Token: idem.Token(token)}
	copy(rec.Fingerprint[:], fp)
	if rec.Status != idem.StatusProcessing {
		out.Status = rec.Status
		out.ErrCode, out.ErrMessage = string(code), string(msg)
		rec.Outcome = out
	}
	return rec
}

// Claim implements idem.Store. The same request repeated (same token, same
// payload) while its record is PROCESSING is claimed again, so a caller may
// retry a claim whose reply it lost; when a reply is lost, Claim releases
// the claim it may have made before it returns the error. See the package
// documentation, section Lease-mode claims.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	if s.part != nil {
		return s.claimPartitioned(ctx, req)
	}
	if s.finals.has(req.Key) {
		c, ok, err := s.replayHinted(ctx, s.pool, req)
		if err != nil {
			return idem.Claim{}, fail("claim", req.Key, err)
		}
		if ok {
			return c, nil
		}
	}
	args := s.claimArgs(req)
	sql, withSlow := s.sql.fast, true
	for range maxClaimAttempts {
		c, res, err := s.claimOnce(ctx, req, sql, withSlow, args)
		if err != nil {
			return idem.Claim{}, err
		}
		if res == claimAnswered {
			s.finals.noteClaim(req.Key, c)
			return c, nil
		}
		if res == claimAgain {
			s.claimRetries.Add(1)
		}
		sql, withSlow = s.sql.claim, false
	}
	return idem.Claim{}, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
}

// claimOnce runs one claim statement on a connection of its own, with SET
// LOCAL lock_timeout in the same round trip when the store has one.
func (s *Store) claimOnce(ctx context.Context, req idem.ClaimRequest, sql string, withSlow bool, args []any) (idem.Claim, claimResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idem.Claim{}, claimAgain, fail("claim", req.Key, err)
	}
	pid := conn.Conn().PgConn().PID()
	var (
		c   idem.Claim
		res claimResult
	)
	if s.lockTimeout > 0 {
		b := &pgx.Batch{}
		b.Queue(setLockTimeout, lockTimeoutValue(s.lockTimeout))
		b.Queue(sql, args...).Query(func(r pgx.Rows) error {
			var serr error
			c, res, serr = scanClaim(r, withSlow)
			return serr
		})
		err = conn.SendBatch(ctx, b).Close()
	} else {
		var rows pgx.Rows
		if rows, err = conn.Query(ctx, sql, args...); err == nil {
			c, res, err = scanClaim(rows, withSlow)
		}
	}
	if err != nil {
		lost := uncertain(err)
		if lost {
			// Hang up, so that the server session ends once it has
			// run what it received.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
		if lost {
			s.settle(ctx, req.Key, req.Token, pid)
		}
		return idem.Claim{}, claimAgain, fail("claim", req.Key, err)
	}
	conn.Release()
	return c, res, nil
}

// uncertain reports whether a statement that failed with err may have been
// applied: it was sent, and the server did not answer with an error.
func uncertain(err error) bool {
	if _, isPg := errors.AsType[*pgconn.PgError](err); isPg {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// settle undoes a claim whose reply was lost: on a connection of its own and
// a context detached from the caller's (bounded by settleTimeout), it waits
// until the server session that received the claim (pid; its connection
// was closed) has ended, so the claim has committed or rolled back, and
// until no transaction writes the key, then deletes the PROCESSING record
// of token, if any. It is best effort: a session the server keeps alive
// past settleTimeout (a network partition it has not noticed) or a failure
// of settle itself leaves the record to lapse with its lease.
func (s *Store) settle(ctx context.Context, key idem.Key, token idem.Token, pid uint32) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	for {
		var alive bool
		if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)",
			int64(pid)).Scan(&alive); err != nil {
			return
		}
		if !alive {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.settle, key.ID[:])
	b.Queue("ROLLBACK")
	b.Queue(s.sql.release, key.ID[:], int64(token))
	_ = s.pool.SendBatch(ctx, b).Close()
}

func completeArgs(key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) ([]any, error) {
	if err := idem.CheckOutcome(&out, ttl); err != nil {
		return nil, fail("complete", key, err)
	}
	// Body and Meta keep nil as NULL; ErrCode and ErrMessage are bytes as
	// given (NUL bytes and invalid UTF-8 included).
	return []any{key.ID[:], int64(token), int16(out.Status), out.Body,
		[]byte(out.ErrCode), []byte(out.ErrMessage), out.Meta, micros(ttl)}, nil
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

// check runs a statement that returns one boolean.
func (s *Store) check(ctx context.Context, sql string, args ...any) (bool, error) {
	var v bool
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&v)
	return v, err
}

// Complete implements idem.Store: it stores out in the PROCESSING record that
// holds token. When the record already holds token's own final outcome (a
// Complete repeated after a lost reply), it answers nil and changes
// nothing. Otherwise, when the record expired, is gone, or holds another
// token, it returns an error wrapping idem.ErrLeaseLost. An outcome larger
// than idem.MaxOutcomeLen is refused with idem.ErrTooLarge.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	args, err := completeArgs(key, token, out, ttl)
	if err != nil {
		return err
	}
	exec := s.exec
	if s.part != nil {
		if err := s.partitionsFor(ctx, ttl); err != nil {
			return fail("complete", key, err)
		}
		exec = func(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
			return s.lockedExec(ctx, key, sql, args...)
		}
	}
	tag, err := exec(ctx, s.sql.complete, args...)
	if err != nil {
		return fail("complete", key, err)
	}
	if tag.RowsAffected() == 1 {
		s.finals.add(key)
		return nil
	}
	done, err := s.check(ctx, s.sql.completeCheck, key.ID[:], int64(token))
	if err != nil {
		return fail("complete", key, err)
	}
	if done {
		s.finals.add(key)
		return nil
	}
	return fail("complete", key, idem.ErrLeaseLost)
}

// Release implements idem.Store: it deletes the PROCESSING record that holds
// token. When there is no live record it answers nil (a Release repeated
// after a lost reply); a live record that is final or holds another token
// is left alone, with an error wrapping idem.ErrLeaseLost.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	tag, err := s.exec(ctx, s.sql.release, key.ID[:], int64(token))
	if err != nil {
		return fail("release", key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	live, err := s.check(ctx, s.sql.releaseCheck, key.ID[:])
	if err != nil {
		return fail("release", key, err)
	}
	if live {
		return fail("release", key, idem.ErrLeaseLost)
	}
	return nil
}

// Renew implements idem.Renewer: it sets the lease of the PROCESSING record
// that holds token to lease from the database's now, never beyond the
// record's expiry, or returns an error wrapping idem.ErrLeaseLost when the
// record expired, is gone, final or holds another token. It changes no
// indexed column.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return fail("renew", key, errors.New("lease must be positive"))
	}
	tag, err := s.exec(ctx, s.sql.renew, key.ID[:], int64(token), micros(lease))
	if err != nil {
		return fail("renew", key, err)
	}
	if tag.RowsAffected() != 1 {
		return fail("renew", key, idem.ErrLeaseLost)
	}
	return nil
}

// migrateLockID is the advisory lock key that serializes concurrent Migrate
// calls ("idemgen" in ASCII).
const migrateLockID int64 = 0x6964656d67656e

// MigrationSQL returns the schema for this store's table names: Schema and
// ListSchema, plus ArchiveSchema with WithArchive, with the default names
// replaced by the configured (quoted) ones. The indexes are named after the
// table with the suffixes _sweep_at_idx and _op_created_idx; when that would
// exceed 63 bytes, the table name is cut and followed by 8 hex digits of
// its SHA-256.
func (s *Store) MigrationSQL() string {
	if s.part != nil {
		return s.partitionedSQL()
	}
	return s.schemaSQL(Schema+"\n"+ListSchema, "idem_records_sweep_at_idx", s.sql.index)
}

// schemaSQL returns schema, plus ArchiveSchema with WithArchive, with the
// default names replaced by the store's (quoted) ones: index, the default
// name of the schema's index, by indexName.
func (s *Store) schemaSQL(schema, index, indexName string) string {
	pairs := []string{index, indexName, "idem_records_op_created_idx", s.listIndex()}
	if s.archive != nil {
		pairs = append(pairs, "idem_records_archive", s.sql.archive)
	}
	pairs = append(pairs, "idem_records", s.sql.table)
	r := strings.NewReplacer(pairs...)
	sql := r.Replace(schema)
	if s.archive != nil {
		sql += "\n" + r.Replace(ArchiveSchema)
	}
	return sql
}

// Migrate creates the store's table, index and (with WithArchive) archive
// table if they do not exist, and upgrades tables of layout 1 (created by
// v0.1) in place (see the package documentation). It is idempotent and safe
// to call from several processes at once: a transaction-scoped advisory lock
// serializes them.
func (s *Store) Migrate(ctx context.Context) error {
	if s.part != nil {
		return s.migratePartitioned(ctx)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", migrateLockID); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := s.upgrade(ctx, tx, s.table, true); err != nil {
		return fmt.Errorf("pgstore: migrate: upgrade %s: %w", s.sql.table, err)
	}
	if s.archive != nil {
		if err := s.upgrade(ctx, tx, s.archive, false); err != nil {
			return fmt.Errorf("pgstore: migrate: upgrade %s: %w", s.sql.archive, err)
		}
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

// upgrade converts table from layout 1 (v0.1: tenant, op, key_text, err_code
// and err_message as text, primary key (tenant, op, key), updated_at, an
// expires_at index) to layout 2, if it exists in layout 1; records is false
// for an archive table (no primary key, no index).
func (s *Store) upgrade(ctx context.Context, tx pgx.Tx, table pgx.Identifier, records bool) error {
	name := table.Sanitize()
	var old bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'tenant' AND atttypid = 'text'::regtype AND NOT attisdropped)`,
		name).Scan(&old); err != nil || !old {
		return err
	}
	var sql strings.Builder
	if records {
		var pk string
		if err := tx.QueryRow(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'`,
			name).Scan(&pk); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if pk != "" {
			fmt.Fprintf(&sql, "ALTER TABLE %s DROP CONSTRAINT %s;\n", name, pgx.Identifier{pk}.Sanitize())
		}
		// v0.1's index name: the table's name and _expires_at_idx, cut at
		// 63 bytes (a 63-byte table name had none).
		oldIdx := table[len(table)-1] + "_expires_at_idx"
		if len(oldIdx) <= 63 {
			idx := append(pgx.Identifier{}, table[:len(table)-1]...)
			fmt.Fprintf(&sql, "DROP INDEX IF EXISTS %s;\n", append(idx, oldIdx).Sanitize())
		}
	}
	fmt.Fprintf(&sql, `ALTER TABLE %s
	ALTER COLUMN tenant TYPE bytea USING convert_to(tenant, 'UTF8'),
	ALTER COLUMN op TYPE bytea USING convert_to(op, 'UTF8'),
	ALTER COLUMN key_text DROP DEFAULT,
	ALTER COLUMN key_text TYPE bytea USING convert_to(key_text, 'UTF8'),
	ALTER COLUMN key_text SET DEFAULT ''::bytea,
	ALTER COLUMN err_code TYPE bytea USING convert_to(err_code, 'UTF8'),
	ALTER COLUMN err_message TYPE bytea USING convert_to(err_message, 'UTF8'),
	ADD COLUMN scheme integer NOT NULL DEFAULT 0,
	ADD COLUMN sweep_at timestamptz,
	DROP COLUMN updated_at;
UPDATE %[1]s SET sweep_at = expires_at;
ALTER TABLE %[1]s ALTER COLUMN sweep_at SET NOT NULL`, name)
	if records {
		sql.WriteString(", ADD PRIMARY KEY (key), SET (fillfactor = 80)")
	}
	_, err := tx.Exec(ctx, sql.String())
	return err
}

// Sweep removes at most limit expired records (or, with WithArchive, moves
// them to the archive table) and returns how many it removed; with limit <=
// 0 it removes every expired record, DefaultSweepBatch per statement. A
// caller that sweeps in bounded steps calls it again while it returns limit.
// Rows locked by another transaction are skipped, so several sweepers, in
// one process or many, can run at once without waiting on each other or on
// claims. Each statement looks at no more rows than it may remove: it
// follows the sweep_at index, and a record it finds still live (its outcome
// was stored later than its claim) is moved to its own expiry and not looked
// at again before then. In partitioned mode (WithPartitions) it drops whole
// partitions instead, whatever their number of records, and creates the
// partitions ahead; limit does not bound it (see WithPartitions).
func (s *Store) Sweep(ctx context.Context, limit int) (removed int, err error) {
	if s.part != nil {
		return s.sweepPartitions(ctx)
	}
	all := limit <= 0
	for all || removed < limit {
		n := DefaultSweepBatch
		if !all {
			n = min(n, limit-removed)
		}
		var deleted, moved int
		if err := s.pool.QueryRow(ctx, s.sql.sweep, n).Scan(&deleted, &moved); err != nil {
			return removed, fmt.Errorf("pgstore: sweep: %w", err)
		}
		removed += deleted
		if deleted+moved < n {
			return removed, nil // no more rows due
		}
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("pgstore: sweep: %w", err)
		}
	}
	return removed, nil
}

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Renewer = (*Store)(nil)
)
