package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
)

// This file is the operators' capability, idem.AdminStore, in every mode
// (docs/decisions/operator-records.md). The listing follows the index
// <table>_op_created_idx on (op, created_at, key), version 3 of the
// migrations: created_at and op never change after a claim (a takeover
// keeps created_at), so the index costs each claim one more index entry and
// leaves every Complete a HOT update. Status and leases are not indexed
// (they change at Complete): List reads at most ListScanBudget index
// entries per call and filters them, so one call never scans the table.

// ListScanBudget is how many records of an operation one List call reads
// at most (newest first, from the cursor on) to fill its page: a page of a
// rare status may be short, or empty, with a Next cursor to go on from.
const ListScanBudget = 10000

// forgetLockTimeout bounds how long Forget waits for the key's row and
// lock; a transactional claim holds them while its method runs.
const forgetLockTimeout = time.Second

// adminCols are the columns an Entry is read from, for a table aliased c,
// and the statement's now.
const adminCols = `c.key, c.tenant, c.op, c.key_text, c.status, c.fingerprint, c.scheme, c.token,
	c.created_at, c.expires_at, c.lease_until, c.body, c.err_code, c.err_message, c.meta, ` + ts

// liveSQL is the condition of a live record c in the store's mode.
func (s *Store) liveSQL() string { return s.liveOf("c") }

// liveOf is the condition of a live record r in the store's mode.
func (s *Store) liveOf(r string) string {
	if s.part != nil {
		return live(r)
	}
	return r + ".expires_at > " + ts
}

// scanEntry reads one row of adminCols.
func scanEntry(row pgx.Row) (idem.Entry, error) {
	var (
		e                                 idem.Entry
		id, fp, tenant, op, text          []byte
		code, msg                         []byte
		status                            int16
		scheme                            int32
		token                             int64
		created, expires, leaseUntil, now time.Time
	)
	if err := row.Scan(&id, &tenant, &op, &text, &status, &fp, &scheme, &token, &created, &expires, &leaseUntil,
		&e.Outcome.Body, &code, &msg, &e.Outcome.Meta, &now); err != nil {
		return idem.Entry{}, err
	}
	copy(e.Key.ID[:], id)
	copy(e.Fingerprint[:], fp)
	e.Key.Tenant, e.Key.Op, e.Key.Text = string(tenant), string(op), string(text)
	e.Status, e.Scheme, e.Token = idem.Status(status), uint32(scheme), idem.Token(token)
	e.Created, e.Expires = created, expires
	if e.Status == idem.StatusProcessing {
		e.LeaseUntil = leaseUntil
		e.LeaseLeft = max(leaseUntil.Sub(now), 0)
	} else {
		e.Outcome.Status, e.Outcome.ErrCode, e.Outcome.ErrMessage = e.Status, string(code), string(msg)
	}
	return e, nil
}

// Lookup implements idem.AdminStore: one index probe of the key.
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	sql := `SELECT ` + adminCols + ` FROM ` + s.sql.table + ` c WHERE c.key = $1::bytea AND ` + s.liveSQL() +
		` ORDER BY c.created_at DESC LIMIT 1`
	e, err := scanEntry(s.pool.QueryRow(ctx, sql, key.ID[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Entry{}, fail("lookup", key, idem.ErrNotFound)
	}
	if err != nil {
		return idem.Entry{}, fail("lookup", key, err)
	}
	return e, nil
}

// ListSQL returns the statement and arguments List runs for q: for
// EXPLAIN in tests and docs (see docs/decisions/operator-records.md).
func (s *Store) ListSQL(q idem.ListQuery) (string, []any, error) {
	var (
		args  []any
		scan  []string // conditions the index scan applies (op, cursor, age)
		match []string // conditions on the rows read
	)
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if q.Cursor != "" {
		ct, cid, err := idem.ParseListCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		scan = append(scan, "(c.created_at, c.key) < ("+arg(ct)+"::timestamptz, "+arg(cid[:])+"::bytea)")
	}
	if q.MaxAge > 0 {
		scan = append(scan, "c.created_at >= "+ts+" - "+us(arg(micros(q.MaxAge))))
	}
	if q.MinAge > 0 {
		scan = append(scan, "c.created_at <= "+ts+" - "+us(arg(micros(q.MinAge))))
	}
	match = append(match, s.liveOf("w"))
	if q.ByTenant {
		match = append(match, "w.tenant = "+arg([]byte(q.Tenant))+"::bytea")
	}
	if q.Status != 0 {
		match = append(match, "w.status = "+arg(int16(q.Status))+"::smallint")
	}
	if q.Stuck {
		match = append(match, "w.status = 1 AND w.lease_until <= "+ts)
	}
	limit := arg(q.PageLimit() + 1)
	budget := arg(ListScanBudget)
	// w: at most budget records of one operation, newest first, by the
	// index, with the columns the filters read; the page: the first limit
	// of them that match, each read whole by its key (one probe each), and
	// the last record read (edge), where the next call goes on when the
	// budget ran out before the page filled.
	cols := "c.key, c.created_at, c.tenant, c.status, c.lease_until, c.expires_at"
	if s.part != nil {
		cols += ", c.part_at"
	}
	window := func(opCond string) string {
		return `SELECT ` + cols + ` FROM ` + s.sql.table + ` c WHERE ` + strings.Join(append([]string{opCond}, scan...), " AND ") +
			` ORDER BY c.created_at DESC, c.key DESC LIMIT ` + budget + `::int`
	}
	var w string
	if q.Op != "" {
		w = window("c.op = " + arg([]byte(q.Op)) + "::bytea")
	} else {
		// Every operation: the distinct operations by a loose scan of the
		// index (one probe each), then each one's window, merged.
		w = `WITH RECURSIVE ops(op) AS (
	(SELECT c.op FROM ` + s.sql.table + ` c ORDER BY c.op LIMIT 1)
	UNION ALL
	SELECT (SELECT c.op FROM ` + s.sql.table + ` c WHERE c.op > ops.op ORDER BY c.op LIMIT 1) FROM ops WHERE ops.op IS NOT NULL
)
SELECT x.* FROM ops, LATERAL (` + window("c.op = ops.op") + `) x
ORDER BY x.created_at DESC, x.key DESC LIMIT ` + budget + `::int`
	}
	sql := `WITH w AS MATERIALIZED (` + w + `)
(SELECT ` + adminCols + `, false AS edge
FROM (SELECT w.key, w.created_at FROM w WHERE ` + strings.Join(match, " AND ") + `
	ORDER BY w.created_at DESC, w.key DESC LIMIT ` + limit + `::int) m,
	LATERAL (SELECT * FROM ` + s.sql.table + ` c WHERE c.key = m.key AND c.created_at = m.created_at LIMIT 1) c
ORDER BY c.created_at DESC, c.key DESC)
UNION ALL
(SELECT w.key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, w.created_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true
FROM w ORDER BY w.created_at, w.key LIMIT (SELECT CASE WHEN count(*) = ` + budget + `::int THEN 1 ELSE 0 END FROM w))`
	return sql, args, nil
}

// List implements idem.AdminStore: newest first, by the index on (op,
// created_at, key), reading at most ListScanBudget records per call (see
// ListScanBudget); without an operation, each operation's newest first,
// merged.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	sql, args, err := s.ListSQL(q)
	if err != nil {
		return idem.Page{}, fmt.Errorf("pgstore: list: %w", err)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return idem.Page{}, failList("list", err)
	}
	defer rows.Close()
	var (
		p    idem.Page
		edge *idem.Entry
	)
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return idem.Page{}, failList("list", err)
		}
		if vals[len(vals)-1].(bool) {
			e := idem.Entry{Created: vals[8].(time.Time)}
			copy(e.Key.ID[:], vals[0].([]byte))
			edge = &e
			continue
		}
		e, err := scanEntry(valuesRow(vals[:len(vals)-1]))
		if err != nil {
			return idem.Page{}, failList("list", err)
		}
		p.Entries = append(p.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return idem.Page{}, failList("list", err)
	}
	if n := q.PageLimit(); len(p.Entries) > n {
		p.Entries = p.Entries[:n]
		p.Next = idem.ListCursor(p.Entries[n-1])
	} else if edge != nil {
		p.Next = idem.ListCursor(*edge)
	}
	return p, nil
}

// valuesRow is a pgx.Row of values already read.
type valuesRow []any

func (v valuesRow) Scan(dest ...any) error {
	for i, d := range dest {
		switch d := d.(type) {
		case *[]byte:
			*d, _ = v[i].([]byte)
		case *int16:
			*d = v[i].(int16)
		case *int32:
			*d = v[i].(int32)
		case *int64:
			*d = v[i].(int64)
		case *time.Time:
			*d = v[i].(time.Time)
		default:
			return fmt.Errorf("pgstore: scan %T", d)
		}
	}
	return nil
}

// failList wraps err of a statement without a key, as fail does.
func failList(op string, err error) error {
	if schemaMissing(err) {
		return fmt.Errorf("pgstore: %s: %w: run the store's Migrate method (or apply pgstore's migrations) on this database: %w",
			op, idem.ErrStoreSchema, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// Stats implements idem.AdminStore. It reads every live record of the
// selected operations (one scan): an operator's question, not a metric to
// poll (idemotel's metrics are).
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	var args []any
	cond := []string{s.liveSQL()}
	if q.ByTenant {
		args = append(args, []byte(q.Tenant))
		cond = append(cond, "c.tenant = $"+strconv.Itoa(len(args))+"::bytea")
	}
	if q.Op != "" {
		args = append(args, []byte(q.Op))
		cond = append(cond, "c.op = $"+strconv.Itoa(len(args))+"::bytea")
	}
	sql := `SELECT c.op, c.status, c.status = 1 AND c.lease_until <= ` + ts + ` AS stuck, count(*) FROM ` + s.sql.table +
		` c WHERE ` + strings.Join(cond, " AND ") + ` GROUP BY 1, 2, 3`
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, failList("stats", err)
	}
	m := map[idem.Stat]int64{}
	var (
		op     []byte
		status int16
		stuck  bool
		n      int64
	)
	_, err = pgx.ForEachRow(rows, []any{&op, &status, &stuck, &n}, func() error {
		m[idem.Stat{Op: string(op), Status: idem.Status(status), Stuck: stuck}] += n
		return nil
	})
	if err != nil {
		return nil, failList("stats", err)
	}
	return idem.SortedStats(m), nil
}

// Forget implements idem.AdminStore: in one transaction, under the key's
// advisory lock (which partitioned mode's writes and a transactional claim
// hold), it deletes the live record if it still holds req's token and
// status; the row's own lock and PostgreSQL's recheck of the DELETE's
// condition on its latest version fence a concurrent lease-mode claim. A
// transactional claim holds the key while its method runs: Forget waits
// for it at most a second, then answers idem.ErrLeaseLive, forced or not.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	sql := `WITH d AS (
	DELETE FROM ` + s.sql.table + ` c WHERE c.key = $1::bytea AND ` + s.liveSQL() + `
		AND c.token = $2::bigint AND c.status = $3::smallint
		AND (c.status <> 1 OR c.lease_until <= ` + ts + ` OR $4::bool)
	RETURNING 1
)
SELECT (SELECT count(*) FROM d), r.token, r.status, r.status = 1 AND r.lease_until > ` + ts + `
FROM (SELECT 1) one LEFT JOIN LATERAL (
	SELECT c.token, c.status, c.lease_until FROM ` + s.sql.table + ` c
	WHERE c.key = $1::bytea AND ` + s.liveSQL() + ` ORDER BY c.created_at DESC LIMIT 1) r ON true`
	var (
		deleted int64
		token   *int64
		status  *int16
		leased  *bool
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(setLockTimeout, lockTimeoutValue(forgetLockTimeout))
	b.Queue("SELECT pg_advisory_xact_lock($1::bigint)", keyLock(req.Key))
	b.Queue(sql, req.Key.ID[:], int64(req.Token), int16(req.Status), req.Force).QueryRow(func(r pgx.Row) error {
		return r.Scan(&deleted, &token, &status, &leased)
	})
	b.Queue("COMMIT")
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fail("forget", req.Key, err)
	}
	err = conn.SendBatch(ctx, b).Close()
	end(ctx, conn)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
		return fail("forget", req.Key, fmt.Errorf("held by an open transaction: %w", idem.ErrLeaseLive))
	}
	switch {
	case err != nil:
		return fail("forget", req.Key, err)
	case deleted == 1:
		s.finals.forget(req.Key)
		return nil
	case token == nil:
		return fail("forget", req.Key, idem.ErrNotFound)
	case idem.Token(*token) != req.Token || idem.Status(*status) != req.Status:
		return fail("forget", req.Key, idem.ErrRecordChanged)
	case *leased && !req.Force:
		return fail("forget", req.Key, idem.ErrLeaseLive)
	}
	return fail("forget", req.Key, idem.ErrRecordChanged) // changed under the statement
}

var _ idem.AdminStore = (*Store)(nil)

// listIndex is the quoted name of the store's index of the operators'
// listing, derived from the table's name as the sweep index's is.
func (s *Store) listIndex() string {
	return pgx.Identifier{derivedIdent(s.table[len(s.table)-1], "_op_created_idx")}.Sanitize()
}
