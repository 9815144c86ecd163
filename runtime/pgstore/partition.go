package pgstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
)

// PartitionedSchema is the SQL that creates the default table, idem_records,
// in partitioned mode (see WithPartitions): partitioned by range of part_at,
// with an index on key. It creates no partition: Migrate creates the first
// ones and Sweep the next. It is safe to run more than once.
//
//go:embed migrations/partitioned/idem_records.sql
var PartitionedSchema string

// MinPartitionInterval is the shortest interval WithPartitions accepts.
const MinPartitionInterval = time.Minute

// partitionsAhead is how many intervals beyond the longest TTL a store has
// seen Sweep and Migrate keep partitions created for (a claim looks into
// every partition ahead: keep it small).
const partitionsAhead = 2

// ddlLockTimeout bounds how long a statement that creates or detaches a
// partition waits for a lock, so that partition maintenance never queues
// claims behind it for long; it is tried again on the next Sweep.
const ddlLockTimeout = 2 * time.Second

// WithPartitions makes the store keep its records in a table partitioned by
// time, one partition per interval, instead of one table swept row by row:
// Sweep drops a partition whole once every record in it has expired and
// creates partitions ahead of the clock. Choose an interval of about a
// quarter to an eighth of the longest TTL. interval must be a whole number
// of seconds and at least MinPartitionInterval; New panics otherwise.
// Create the table with Migrate (PartitionedSchema). See the package
// documentation, section Partitioned tables.
func WithPartitions(interval time.Duration) Option {
	return func(c *config) { c.partitions = interval }
}

// partitioning is the state of a store in partitioned mode.
type partitioning struct {
	interval time.Duration
	name     string // the table's unquoted name (its last part)
	// horizon is the Unix microsecond up to which this store knows the
	// partitions exist (by the database clock when it created them).
	horizon atomic.Int64
	// maxTTL is the longest TTL this store has claimed with, in µs.
	maxTTL atomic.Int64
	// mu makes one caller create the partitions that concurrent claims
	// need, while the others wait for it.
	mu sync.Mutex
	// claimFast is the lease-mode claim of the usual cases (see
	// fastClaimSQL); claim the full claim and keyLock the key's lock (see
	// buildPartitionStatements), which both modes run.
	claimFast, claim, keyLock string
	// claimTx is claim reading nothing without the key's lock, and decide
	// the first statement of a transactional claim (see decideSQL).
	claimTx, decide string
}

func newPartitioning(interval time.Duration, table pgx.Identifier) *partitioning {
	if interval < MinPartitionInterval || interval%time.Second != 0 {
		panic(fmt.Sprintf("pgstore: WithPartitions(%v): the interval must be a whole number of seconds, at least %v", interval, MinPartitionInterval))
	}
	p := &partitioning{interval: interval, name: table[len(table)-1], claimFast: fastClaimSQL(table.Sanitize(), interval)}
	p.claim, p.keyLock = claimSQL(table.Sanitize(), interval)
	p.claimTx = strings.Replace(p.claim, "WHERE c.key = $1::bytea AND ",
		"WHERE current_setting('idemgen.key_locked', true) = 'on' AND c.key = $1::bytea AND ", 1)
	p.decide = decideSQL(table.Sanitize(), live("c"))
	return p
}

// fastClaimSQL is the claim of the usual cases, a new key or a live record
// (a replay, a duplicate in progress), with no UPDATE or DELETE of the
// partitioned table: PostgreSQL sets one up for every partition whenever
// the statement starts, which cost a replay more than its lookup. It
// returns no row in the other cases (this caller's own claim repeated, a
// lapsed lease to take over, the key's lock not taken): the caller then
// runs the full claim, with the lock.
func fastClaimSQL(t string, interval time.Duration) string {
	return fmt.Sprintf(`WITH rec AS MATERIALIZED (
	SELECT c.status, c.fingerprint, c.scheme, c.token, c.lease_until - %[2]s AS lease_left,
		c.body, c.err_code, c.err_message, c.meta,
		c.status = 1 AND (c.token = $2::bigint OR c.lease_until <= %[2]s) AND c.fingerprint = $6::bytea AS full_claim
	FROM %[1]s c
	WHERE c.key = $1::bytea AND c.part_at > %[2]s AND c.expires_at > %[2]s
), ins AS (
	INSERT INTO %[1]s (key, tenant, op, key_text, fingerprint, scheme, status, token,
		lease_until, created_at, expires_at, part_at)
	SELECT $1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $9::int, 1, $2::bigint,
		%[2]s + %[3]s, %[2]s, %[2]s + %[4]s, %[2]s + %[4]s + interval '%[5]d seconds'
	WHERE current_setting('idemgen.key_locked', true) = 'on' AND NOT EXISTS (SELECT 1 FROM rec)
	RETURNING false AS taken_over
)
SELECT true, ins.taken_over, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea
FROM ins
UNION ALL
SELECT false, false, status, fingerprint, scheme, token, lease_left, body, err_code, err_message, meta
FROM rec WHERE NOT full_claim`, t, ts, us("$7"), us("$8"), int64(interval/time.Second))
}

// keyLockSQL is the key's advisory lock (keyLock) computed in SQL from the
// key ID parameter p.
func keyLockSQL(p string) string {
	return "('x' || encode(substring(" + p + "::bytea from 1 for 8), 'hex'))::bit(64)::bigint"
}

// live is the condition of a live record r of the partitioned table, which
// prunes the partitions that hold only expired records.
func live(r string) string { return r + ".part_at > " + ts + " AND " + r + ".expires_at > " + ts }

// claimSQL returns the full claim and the key's lock of partitioned mode,
// for table t: the claim's parameters are those of the plain claim, the
// lock's those of the plain keyLock ($1 the key's lock, $2 key ID, $3
// force, $4 and $5 the payload lock).
func claimSQL(t string, interval time.Duration) (claim, keyLock string) {
	iv := fmt.Sprintf("interval '%d seconds'", int64(interval/time.Second))
	// The claim. rec: the key's live records, one scan of the partitions
	// that may hold one (at most one is live). own: this caller's own live
	// claim, repeated (a fresh lease). cur: the live record, if any, other
	// than own. gone: a live record whose lease lapsed (same payload) is
	// deleted, re-checked on its latest version under the row lock, and
	// replaced by the new claim, which keeps its created_at (taken over).
	// ins: the new claim, only under the key's lock, only when there is no
	// live record or the lapsed one is gone. own and gone run only when rec
	// says they have a row to change (a replay scans the partitions once).
	// No row comes back when the lapsed record changed under the claim
	// (completed, renewed or released meanwhile) or the key's lock was not
	// taken (a final record that was visible expired): the caller runs it
	// again, with the lock.
	claim = fmt.Sprintf(`WITH rec AS MATERIALIZED (
	SELECT c.status, c.fingerprint, c.scheme, c.token, c.lease_until - %[2]s AS lease_left,
		c.body, c.err_code, c.err_message, c.meta,
		c.status = 1 AND c.token = $2::bigint AND c.fingerprint = $6::bytea AS mine,
		c.status = 1 AND c.lease_until <= %[2]s AND c.fingerprint = $6::bytea AS lapsed
	FROM %[1]s c
	WHERE c.key = $1::bytea AND %[6]s
), own AS (
	UPDATE %[1]s o SET lease_until = LEAST(%[2]s + %[3]s, o.expires_at)
	WHERE EXISTS (SELECT 1 FROM rec WHERE mine)
		AND o.key = $1::bytea AND %[5]s AND o.token = $2::bigint AND o.status = 1 AND o.fingerprint = $6::bytea
	RETURNING true
), cur AS (
	SELECT * FROM rec WHERE NOT mine
), gone AS (
	DELETE FROM %[1]s g
	WHERE EXISTS (SELECT 1 FROM rec WHERE lapsed AND NOT mine)
		AND g.key = $1::bytea AND %[7]s AND g.token = (SELECT token FROM cur WHERE lapsed)
		AND g.status = 1 AND g.lease_until <= %[2]s AND g.fingerprint = $6::bytea
		AND current_setting('idemgen.key_locked', true) = 'on'
	RETURNING g.created_at
), ins AS (
	INSERT INTO %[1]s (key, tenant, op, key_text, fingerprint, scheme, status, token,
		lease_until, created_at, expires_at, part_at)
	SELECT $1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $9::int, 1, $2::bigint,
		%[2]s + %[3]s, coalesce((SELECT created_at FROM gone), %[2]s), %[2]s + %[4]s, %[2]s + %[4]s + %[8]s
	WHERE current_setting('idemgen.key_locked', true) = 'on'
		AND NOT EXISTS (SELECT 1 FROM own) AND NOT EXISTS (SELECT 1 FROM cur WHERE NOT lapsed)
		AND (NOT EXISTS (SELECT 1 FROM cur) OR EXISTS (SELECT 1 FROM gone))
	RETURNING created_at < %[2]s AS taken_over
)
SELECT true, ins.taken_over, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea
FROM ins
UNION ALL
SELECT true, false, 1::smallint, $6::bytea, $9::int, $2::bigint, interval '0',
	NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea
FROM own
UNION ALL
SELECT false, false, status, fingerprint, scheme, token, lease_left, body, err_code, err_message, meta
FROM cur WHERE NOT lapsed`, t, ts, us("$7"), us("$8"), live("o"), live("c"), live("g"), iv)
	keyLock = fmt.Sprintf(`SELECT pg_advisory_xact_lock_shared($4::int, $5::int), pg_advisory_xact_lock($1::bigint),
	set_config('idemgen.key_locked', 'on', true)
WHERE $3::bool OR NOT EXISTS (SELECT 1 FROM %[1]s c WHERE c.key = $2::bytea AND c.status <> 1 AND %[2]s)`, t, live("c"))
	return claim, keyLock
}

// buildPartitionStatements returns the statements of partitioned mode that
// the code of both layouts runs (the claims are the partitioning's); the
// parameters of each are those of the plain statement of the same name.
func buildPartitionStatements(table, archive pgx.Identifier, interval time.Duration) statements {
	st := buildStatements(table, archive)
	t := st.table
	iv := fmt.Sprintf("interval '%d seconds'", int64(interval/time.Second))
	// Complete (run under the key's lock): the outcome is stored in place
	// when its expiry fits the record's partition (u), else the record
	// moves to the partition of its new expiry (m, i). One row comes back
	// when the outcome was stored.
	st.complete = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s c SET status = $3::smallint, body = $4::bytea, err_code = $5::bytea, err_message = $6::bytea,
		meta = $7::bytea, lease_until = %[2]s, expires_at = %[2]s + %[3]s
	WHERE c.key = $1::bytea AND c.part_at >= %[2]s + %[3]s AND c.token = $2::bigint AND c.status = 1 AND c.expires_at > %[2]s
	RETURNING 1
), m AS (
	DELETE FROM %[1]s c
	WHERE c.key = $1::bytea AND c.part_at > %[2]s AND c.part_at < %[2]s + %[3]s AND c.token = $2::bigint
		AND c.status = 1 AND c.expires_at > %[2]s
	RETURNING c.key, c.token, c.created_at, c.scheme, c.fingerprint, c.tenant, c.op, c.key_text
), i AS (
	INSERT INTO %[1]s (key, token, lease_until, expires_at, part_at, created_at, scheme, status, fingerprint,
		tenant, op, key_text, body, err_code, err_message, meta)
	SELECT key, token, %[2]s, %[2]s + %[3]s, %[2]s + %[3]s + %[4]s, created_at, scheme, $3::smallint, fingerprint,
		tenant, op, key_text, $4::bytea, $5::bytea, $6::bytea, $7::bytea
	FROM m
	RETURNING 1
)
SELECT 1 FROM u UNION ALL SELECT 1 FROM i`, t, ts, us("$8"), iv)
	st.release = fmt.Sprintf(`DELETE FROM %[1]s c WHERE c.key = $1::bytea AND c.part_at > %[2]s AND c.token = $2::bigint AND c.status = 1`, t, ts)
	st.releaseCheck = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s c WHERE c.key = $1::bytea AND %[2]s)`, t, live("c"))
	st.renew = fmt.Sprintf(`UPDATE %[1]s c SET lease_until = LEAST(%[2]s + %[3]s, c.expires_at)
WHERE c.key = $1::bytea AND c.token = $2::bigint AND c.status = 1 AND %[4]s`, t, ts, us("$3"), live("c"))
	// settle waits until no transaction holds the key's lock (a claim or
	// an outcome being written), inside a transaction the caller rolls back.
	st.settle = "SELECT pg_advisory_xact_lock(" + keyLockSQL("$1") + ")"
	st.sweep = ""
	return st
}

// partitionsFor makes sure, in partitioned mode, that the partitions a claim
// of ttl may write to exist, creating them when this store does not know
// them yet; a store in plain mode does nothing.
func (s *Store) partitionsFor(ctx context.Context, ttl time.Duration) error {
	p := s.part
	if p == nil {
		return nil
	}
	for {
		m := p.maxTTL.Load()
		if micros(ttl) <= m || p.maxTTL.CompareAndSwap(m, micros(ttl)) {
			break
		}
	}
	// A record's part_at is its claim's expiry plus an interval, by the
	// database clock (an outcome stored with a TTL of ttl moves it there
	// from the present); a quarter of an interval more covers a client
	// clock behind the database's. ensurePartitions creates one more
	// interval than that, so that it runs about once an interval.
	need := time.Now().Add(ttl + p.interval + p.interval/4).UnixMicro()
	if need <= p.horizon.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if need <= p.horizon.Load() {
		return nil // created by a concurrent claim
	}
	if err := s.ensurePartitions(ctx, ttl); err != nil {
		return fmt.Errorf("pgstore: create partitions of %s: %w", s.sql.table, err)
	}
	return nil
}

// partition is one partition of the table: [lower, upper).
type partition struct {
	name          pgx.Identifier
	lower, upper  time.Time
	detachPending bool
	tuples        float64
}

// partitionsSQL lists the partitions of table $1 with their bounds, and the
// database's statement time.
const partitionsSQL = `SELECT n.nspname, c.relname,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz,
	i.inhdetachpending, greatest(c.reltuples, 0)::float8
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = to_regclass($1)
ORDER BY 3`

func (s *Store) partitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]partition, error) {
	rows, err := q.Query(ctx, partitionsSQL, s.sql.table)
	if err != nil {
		return nil, err
	}
	var ps []partition
	for rows.Next() {
		var (
			p            partition
			schema, name string
			lower, upper *time.Time
		)
		if err := rows.Scan(&schema, &name, &lower, &upper, &p.detachPending, &p.tuples); err != nil {
			rows.Close()
			return nil, err
		}
		if lower == nil || upper == nil {
			continue // being detached (its bound is gone), or not a range of part_at
		}
		p.name, p.lower, p.upper = pgx.Identifier{schema, name}, *lower, *upper
		ps = append(ps, p)
	}
	return ps, rows.Err()
}

// ensurePartitions creates the partitions that cover the database's now to
// now + the longest TTL seen (at least ttl) + partitionsAhead intervals, in
// one transaction serialized by an advisory lock of the table; ranges that
// an existing partition covers (one of another interval, say) are skipped.
func (s *Store) ensurePartitions(ctx context.Context, ttl time.Duration) error {
	p := s.part
	ahead := max(ttl, time.Duration(p.maxTTL.Load())*time.Microsecond) + partitionsAhead*p.interval
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), statement_timestamp()",
		"idemgen partitions "+s.sql.table).Scan(nil, &now); err != nil {
		return err
	}
	if err := s.createPartitions(ctx, tx, now, now.Add(ahead)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.raiseHorizon(now.Add(ahead))
	return nil
}

func (s *Store) raiseHorizon(t time.Time) {
	for {
		h := s.part.horizon.Load()
		if t.UnixMicro() <= h || s.part.horizon.CompareAndSwap(h, t.UnixMicro()) {
			return
		}
	}
}

// createPartitions creates, in tx, every partition of the store's interval
// (aligned on the Unix epoch) that [from, to) overlaps, except the parts an
// existing partition covers. A partition is created as a table of its own
// and attached, which locks the parent table less than CREATE TABLE …
// PARTITION OF (claims go on meanwhile).
func (s *Store) createPartitions(ctx context.Context, tx pgx.Tx, from, to time.Time) error {
	if _, err := tx.Exec(ctx, setLockTimeout, lockTimeoutValue(ddlLockTimeout)); err != nil {
		return err
	}
	existing, err := s.partitions(ctx, tx)
	if err != nil {
		return err
	}
	iv := int64(s.part.interval / time.Second)
	schema := s.table[:len(s.table)-1]
	for k := floorDiv(from.Unix(), iv); time.Unix(k*iv, 0).Before(to); k++ {
		lo, hi := time.Unix(k*iv, 0).UTC(), time.Unix((k+1)*iv, 0).UTC()
		for _, e := range existing {
			if e.lower.Before(hi) && e.upper.After(lo) { // overlaps
				if !e.lower.After(lo) {
					lo = maxTime(lo, e.upper)
				} else {
					hi = e.lower
				}
			}
		}
		if !lo.Before(hi) {
			continue
		}
		name := append(append(pgx.Identifier{}, schema...), derivedIdent(s.part.name, "_p"+strconv.FormatInt(lo.Unix(), 10)))
		sql := fmt.Sprintf(`CREATE TABLE %[1]s (LIKE %[2]s INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 80);
ALTER TABLE %[2]s ATTACH PARTITION %[1]s FOR VALUES FROM ('%[3]s') TO ('%[4]s')`,
			name.Sanitize(), s.sql.table, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("partition %s: %w", name.Sanitize(), err)
		}
		existing = append(existing, partition{name: name, lower: lo, upper: hi})
	}
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sweepPartitions is Sweep in partitioned mode: it drops every partition
// whose upper bound has passed by the database clock (with WithArchive,
// after copying its records into the archive table) and creates the
// partitions ahead (see ensurePartitions). A partition is detached
// CONCURRENTLY, which never blocks claims, and then dropped; a detach that
// was interrupted is finished first. It returns the number of records the
// dropped partitions held, as PostgreSQL's statistics estimate it
// (pg_class.reltuples, which autovacuum keeps; exact when archiving): a drop
// costs the same whatever that number, so limit does not bound it.
func (s *Store) sweepPartitions(ctx context.Context) (removed int, err error) {
	ps, err := s.partitions(ctx, s.pool)
	if err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	for _, p := range ps {
		if p.upper.After(now) {
			break // ordered by lower bound: the rest may hold live records
		}
		n, err := s.dropPartition(ctx, p)
		if err != nil {
			return removed, fmt.Errorf("pgstore: sweep: drop partition %s: %w", p.name.Sanitize(), err)
		}
		removed += n
	}
	if err := s.ensurePartitions(ctx, 0); err != nil {
		return removed, fmt.Errorf("pgstore: sweep: create partitions: %w", err)
	}
	return removed, nil
}

// dropPartition detaches p (CONCURRENTLY: it waits for the transactions
// that may use it, and locks the parent table only in SHARE UPDATE
// EXCLUSIVE mode), archives its records with WithArchive, and drops it.
func (s *Store) dropPartition(ctx context.Context, p partition) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', $1::text, false)", lockTimeoutValue(ddlLockTimeout)); err != nil {
		return 0, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout") }()
	mode := "CONCURRENTLY"
	if p.detachPending {
		mode = "FINALIZE"
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s %s", s.sql.table, p.name.Sanitize(), mode)); err != nil {
		return 0, err
	}
	removed := int(p.tuples)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if s.archive != nil {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (%[2]s, archived_at) SELECT %[2]s, statement_timestamp() FROM %[3]s`,
			s.sql.archive, partitionColumns, p.name.Sanitize()))
		if err != nil {
			return 0, fmt.Errorf("archive: %w", err)
		}
		removed = int(tag.RowsAffected())
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+p.name.Sanitize()); err != nil {
		return 0, err
	}
	return removed, tx.Commit(ctx)
}

const partitionColumns = "key, token, lease_until, expires_at, part_at, created_at, scheme, status, fingerprint, tenant, op, key_text, body, err_code, err_message, meta"

// partitionedSQL is MigrationSQL in partitioned mode.
func (s *Store) partitionedSQL() string {
	idx := derivedIdent(s.part.name, "_key_idx")
	schema := s.table[:len(s.table)-1]
	return s.schemaSQL(PartitionedSchema+"\n"+ListSchema, "idem_records_key_idx", append(append(pgx.Identifier{}, schema...), idx).Sanitize())
}

// migratePartitioned is Migrate in partitioned mode: it refuses a table of
// the plain layout, creates the partitioned table, its index and (with
// WithArchive) the archive table if they do not exist, and the partitions
// from now to partitionsAhead intervals ahead.
func (s *Store) migratePartitioned(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", migrateLockID); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	var kind *string
	if err := tx.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", s.sql.table).Scan(&kind); err != nil &&
		!errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if kind != nil && *kind != "p" {
		return fmt.Errorf("pgstore: migrate: table %s exists and is not partitioned: WithPartitions needs a table of its own (PartitionedSchema)", s.sql.table)
	}
	if _, err := tx.Exec(ctx, s.partitionedSQL()); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := s.ensurePartitions(ctx, 0); err != nil {
		return fmt.Errorf("pgstore: migrate: create partitions: %w", err)
	}
	return nil
}

// In partitioned mode, the store's statements run with generic plans: a
// custom plan (PostgreSQL's choice for them) plans every partition at each
// execution, since the partitions that may hold a live record are known
// only at run time (part_at > statement_timestamp()), which cost a claim
// more than the claim itself with a dozen partitions; a generic plan prunes
// them when it starts. The caller's setting is saved and, in transactional
// mode, restored after the claim, so that the method's own statements run
// under it.
const (
	planGenericSQL = `SELECT set_config('idemgen.saved_plan_cache_mode', current_setting('plan_cache_mode'), true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`
	planRestoreSQL = `SELECT set_config('plan_cache_mode', current_setting('idemgen.saved_plan_cache_mode'), true)`
)

// queuePlanGeneric queues planGenericSQL in partitioned mode.
func (s *Store) queuePlanGeneric(b *pgx.Batch) {
	if s.part != nil {
		b.Queue(planGenericSQL)
	}
}

// lockedExec runs sql in a transaction of its own, under the key's advisory
// lock (and the store's lock timeout), in one round trip: in partitioned
// mode, every write that may extend a live record does.
func (s *Store) lockedExec(ctx context.Context, key idem.Key, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(planGenericSQL)
	if s.lockTimeout > 0 {
		b.Queue(setLockTimeout, lockTimeoutValue(s.lockTimeout))
	}
	b.Queue("SELECT pg_advisory_xact_lock($1::bigint)", keyLock(key))
	var tag pgconn.CommandTag
	b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	b.Queue("COMMIT")
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return tag, err
	}
	err = conn.SendBatch(ctx, b).Close()
	end(ctx, conn)
	return tag, err
}

// claimPartitioned is Claim in partitioned mode: in one round trip, a
// transaction that takes the key's advisory lock unless a final record is
// visible (a replay takes none), runs the fast claim (fastClaimSQL) and
// commits. A claim that returns no row runs again with the lock and the
// full claim (see buildPartitionStatements).
// A claim whose reply was lost is settled as in plain mode.
func (s *Store) claimPartitioned(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.partitionsFor(ctx, req.TTL); err != nil {
		return idem.Claim{}, fail("claim", req.Key, err)
	}
	args := s.claimArgs(req)
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	for attempt := range maxClaimAttempts {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return idem.Claim{}, fail("claim", req.Key, err)
		}
		pid := conn.Conn().PgConn().PID()
		var (
			c  idem.Claim
			ok bool
		)
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(planGenericSQL)
		if s.lockTimeout > 0 {
			b.Queue(setLockTimeout, lockTimeoutValue(s.lockTimeout))
		}
		b.Queue(s.part.keyLock, keyLock(req.Key), req.Key.ID[:], attempt > 0, pa, pb)
		claim := s.part.claimFast
		if attempt > 0 {
			claim = s.part.claim
		}
		b.Queue(claim, args...).Query(func(r pgx.Rows) error {
			var (
				serr error
				res  claimResult
			)
			c, res, serr = scanClaim(r, false)
			ok = res == claimAnswered
			return serr
		})
		b.Queue("COMMIT")
		err = conn.SendBatch(ctx, b).Close()
		if err != nil {
			lost := uncertain(err)
			if lost {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
				conn.Release()
				s.settle(ctx, req.Key, req.Token, pid)
			} else {
				end(ctx, conn)
			}
			if pgErr, isPg := errors.AsType[*pgconn.PgError](err); isPg && pgErr.Code == "23514" && strings.HasPrefix(pgErr.Message, "no partition") {
				err = fmt.Errorf("%w (the partitions ahead were dropped or never created: run Migrate or Sweep)", err)
			}
			return idem.Claim{}, fail("claim", req.Key, err)
		}
		conn.Release()
		if ok {
			return c, nil
		}
		s.claimRetries.Add(1)
	}
	return idem.Claim{}, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
}

// claimTxPartitioned is one claim of ClaimTx in partitioned mode, as in
// plain mode (see the package documentation, Transactional claims) with
// the partitioned statements: in one round trip, it begins a transaction,
// runs decide (the key's final record, or the key's lock tried without
// waiting), the full claim under generic
// plans (the caller's plan_cache_mode is restored after it; the claim
// reads nothing without the key's lock) and sets the savepoint. The
// partitions were made sure of by ClaimTx.
func (s *TxStore) claimTxPartitioned(ctx context.Context, req idem.ClaimRequest, wait time.Duration, f *flight) (idem.Claim, *txn, bool, error) {
	conn, pending, err := s.acquireConn(ctx, wait)
	if err != nil {
		return idem.Claim{}, nil, false, fail("claim", req.Key, err)
	}
	s.flights.send(f)
	args := s.claimArgs(req)
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	var (
		d     decision
		claim idem.Claim
		res   claimResult
		tx    pgx.Tx
	)
	for attempt := 0; err == nil && (attempt == 0 || d.kind == decideLocked && res != claimAnswered); attempt++ {
		if attempt >= maxClaimAttempts {
			end(ctx, conn)
			return idem.Claim{}, nil, false, fail("claim", req.Key, errors.New("the record kept changing under concurrent claims"))
		}
		b := &pgx.Batch{}
		if attempt == 0 {
			if pending {
				// A parked connection: COMMIT its transaction first.
				b.BeginTx(pgx.TxOptions{BeginQuery: commitSQL})
				b.Queue(beginSQL)
			} else {
				b.BeginTx(pgx.TxOptions{})
			}
		} else {
			// The lapsed record changed under the claim: claim again,
			// under the key's lock already held, in the same transaction.
			s.claimRetries.Add(1)
		}
		b.Queue(planGenericSQL)
		if attempt == 0 {
			b.Queue(s.part.decide, keyLock(req.Key), req.Key.ID[:], pa, pb).Query(func(rows pgx.Rows) error {
				var err error
				d, err = scanDecision(rows, req)
				return err
			})
		}
		b.Queue(s.part.claimTx, args...).Query(func(rows pgx.Rows) error {
			var err error
			claim, res, err = scanClaim(rows, false)
			return err
		})
		b.Queue(planRestoreSQL)
		b.Queue(savepointSQL)
		br := conn.SendBatch(ctx, b)
		if attempt == 0 {
			tx = br.Tx()
		}
		err = br.Close()
	}
	if err == nil && d.kind == decideBusy {
		err = busyPayload(ctx, conn, req, &d)
	}
	return s.claimed(ctx, conn, tx, req, d, claim, err)
}
