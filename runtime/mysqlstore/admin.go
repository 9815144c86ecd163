package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed" // ListIndexSchema
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// This file is the operators' capability, idem.AdminStore, in both modes
// (docs/decisions/operator-records.md, docs/decisions/mysqlstore.md). The
// listing follows the index <table>_op_created_idx on (op, created_at,
// idem_key), version 2 of the migrations: op and created_at never change
// when an outcome is stored (a takeover keeps created_at), so Complete,
// an UPDATE of other columns, writes no entry of it. Status and leases are
// not indexed (they change at Complete): List reads at most ListScanBudget
// index entries per operation and call and filters their rows, so one call
// never scans the table.

// ListIndexSchema is the statement of version 2 of the migrations: the
// index of the operators' listing, for the default table (see
// MigrationFiles; Store.Migrate runs it when the index is absent).
//
//go:embed migrations/golang-migrate/0002_idem_records_list_idx.up.sql
var ListIndexSchema string

// ListScanBudget is how many records of an operation one List call reads
// at most (newest first, from the cursor on) to fill its page: a page of a
// rare status may be short, or empty, with a Next cursor to go on from.
const ListScanBudget = 10000

// forgetLockWait bounds, in seconds (innodb_lock_wait_timeout's unit), how
// long Forget waits for the key's row: a transactional claim holds it while
// its method runs.
const forgetLockWait = 1

const (
	listIndexSuffix = "_op_created_idx"
	errDupKeyName   = 1061 // ER_DUP_KEYNAME
)

// listIndex is the quoted name of the listing index of the store's table.
func (s *Store) listIndex() string { return "`" + s.name + listIndexSuffix + "`" }

// ListIndexSQL returns ListIndexSchema for this store's table name.
func (s *Store) ListIndexSQL() string {
	if s.table == "`"+DefaultTable+"`" {
		return ListIndexSchema
	}
	return strings.NewReplacer("idem_records_op_created_idx", s.listIndex(), "idem_records", s.table).Replace(ListIndexSchema)
}

// migrateListIndex creates the listing index unless it exists: MySQL's
// CREATE INDEX has no IF NOT EXISTS, so the catalogue is asked first, and
// a concurrent Migrate that created it in between (error 1061) is success.
func (s *Store) migrateListIndex(ctx context.Context) error {
	schema := "DATABASE()"
	var args []any
	if db, _, ok := strings.Cut(s.table, "`.`"); ok {
		schema, args = "?", append(args, strings.TrimPrefix(db, "`"))
	}
	args = append(args, s.name, s.name+listIndexSuffix)
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = `+schema+` AND TABLE_NAME = ? AND INDEX_NAME = ?`, args...).Scan(&n)
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, s.ListIndexSQL()); err != nil && errNumber(err) != errDupKeyName {
		return err
	}
	return nil
}

// adminCols are the columns an Entry is read from, for a table aliased c,
// and the statement's now.
const adminCols = `c.idem_key, c.tenant, c.op, c.key_text, c.status, c.fingerprint, c.scheme, c.token,
	c.created_at, c.expires_at, c.lease_until, c.body, c.err_code, c.err_message, c.meta, ` + now

// entryRow is one row of adminCols (and List's edge flag); the integers
// are NULL in an edge row.
type entryRow struct {
	id, tenant, op, text, fp, body, code, msg, meta []byte
	status, scheme, token                           sql.NullInt64
	created, expires, leaseUntil, now               sql.NullInt64
	edge                                            int64
}

func (r *entryRow) dest() []any {
	return []any{&r.id, &r.tenant, &r.op, &r.text, &r.status, &r.fp, &r.scheme, &r.token,
		&r.created, &r.expires, &r.leaseUntil, &r.body, &r.code, &r.msg, &r.meta, &r.now}
}

func usTime(us int64) time.Time { return time.UnixMicro(us) }

func (r *entryRow) entry() idem.Entry {
	var e idem.Entry
	copy(e.Key.ID[:], r.id)
	copy(e.Fingerprint[:], r.fp)
	e.Key.Tenant, e.Key.Op, e.Key.Text = string(r.tenant), string(r.op), string(r.text)
	e.Status, e.Scheme, e.Token = idem.Status(r.status.Int64), uint32(r.scheme.Int64), idem.Token(r.token.Int64)
	e.Created, e.Expires = usTime(r.created.Int64), usTime(r.expires.Int64)
	if e.Status == idem.StatusProcessing {
		e.LeaseUntil = usTime(r.leaseUntil.Int64)
		e.LeaseLeft = max(time.Duration(r.leaseUntil.Int64-r.now.Int64)*time.Microsecond, 0)
	} else {
		e.Outcome = idem.Outcome{Status: e.Status, Body: r.body, ErrCode: string(r.code), ErrMessage: string(r.msg), Meta: r.meta}
	}
	return e
}

// Lookup implements idem.AdminStore: one probe of the primary key. In
// transactional mode a claim whose transaction is open is not visible
// (its row is not committed): Lookup answers idem.ErrNotFound for it.
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	var r entryRow
	q := `SELECT ` + adminCols + ` FROM ` + s.table + ` c WHERE c.idem_key = ? AND c.expires_at > ` + now
	// Committed rows only, whatever the pool's isolation level (see read).
	err := s.read(ctx, func(tx *sql.Tx) error {
		var db querier = s.db
		if tx != nil {
			db = tx
		}
		return db.QueryRowContext(ctx, q, key.ID[:]).Scan(r.dest()...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Entry{}, fail("lookup", key, idem.ErrNotFound)
	}
	if err != nil {
		return idem.Entry{}, fail("lookup", key, err)
	}
	return r.entry(), nil
}

// ListSQL returns the statement and arguments List runs for q: for EXPLAIN
// in tests and docs (docs/decisions/operator-records.md). Without an
// operation it first reads the table's operations (a loose scan of the
// listing index, one probe each), as List does.
func (s *Store) ListSQL(ctx context.Context, q idem.ListQuery) (string, []any, error) {
	var (
		scan     []string // conditions of the index scan (cursor, age), after op
		scanArgs []any
	)
	if q.Cursor != "" {
		ct, cid, err := idem.ParseListCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		us := ct.UnixMicro()
		scan = append(scan, "(w.created_at < ? OR (w.created_at = ? AND w.idem_key < ?))")
		scanArgs = append(scanArgs, us, us, cid[:])
	}
	if q.MaxAge > 0 {
		scan = append(scan, "w.created_at >= "+now+" - ?")
		scanArgs = append(scanArgs, micros(q.MaxAge))
	}
	if q.MinAge > 0 {
		scan = append(scan, "w.created_at <= "+now+" - ?")
		scanArgs = append(scanArgs, micros(q.MinAge))
	}
	var ops []string
	if q.Op != "" {
		ops = []string{q.Op}
	} else {
		var err error
		if ops, err = s.ops(ctx); err != nil {
			return "", nil, err
		}
	}
	budget := strconv.Itoa(ListScanBudget)
	// w: at most budget index entries (key and creation) of each
	// operation, newest first, from the cursor on, by the listing index
	// alone (it covers them); merged over the operations and cut to budget.
	var (
		w     string
		wArgs []any
	)
	window := func(op string) string {
		wArgs = append(append(wArgs, []byte(op)), scanArgs...)
		return `SELECT w.idem_key, w.created_at FROM ` + s.table + ` w FORCE INDEX (` + s.listIndex() + `) WHERE ` +
			strings.Join(append([]string{"w.op = ?"}, scan...), " AND ") +
			` ORDER BY w.created_at DESC, w.idem_key DESC LIMIT ` + budget
	}
	switch len(ops) {
	case 0:
		return "", nil, nil // no records at all
	case 1:
		w = window(ops[0])
	default:
		parts := make([]string, len(ops))
		for i, op := range ops {
			parts[i] = "(" + window(op) + ")"
		}
		w = `SELECT u.idem_key, u.created_at FROM (` + strings.Join(parts, "\nUNION ALL ") + `) u
ORDER BY u.created_at DESC, u.idem_key DESC LIMIT ` + budget
	}
	match := []string{"c.expires_at > " + now}
	var matchArgs []any
	if q.ByTenant {
		match = append(match, "c.tenant = ?")
		matchArgs = append(matchArgs, []byte(q.Tenant))
	}
	if q.Status != 0 {
		match = append(match, "c.status = ?")
		matchArgs = append(matchArgs, int64(q.Status))
	}
	if q.Stuck {
		match = append(match, "c.status = 1 AND c.lease_until <= "+now)
	}
	// The page: the first limit+1 entries of w whose rows match, each row
	// read by its key (one probe each) and then read whole; and the edge:
	// the budget-th entry of w, when w is full, where the next call goes on
	// if the budget ran out before the page filled.
	nulls := strings.Repeat("NULL, ", 7)
	stmt := `(SELECT ` + adminCols + `, 0 AS edge FROM (
	SELECT m.idem_key FROM (` + w + `) m JOIN ` + s.table + ` c ON c.idem_key = m.idem_key
	WHERE ` + strings.Join(match, " AND ") + `
	ORDER BY m.created_at DESC, m.idem_key DESC LIMIT ` + strconv.Itoa(q.PageLimit()+1) + `
) p JOIN ` + s.table + ` c ON c.idem_key = p.idem_key)
UNION ALL
(SELECT e.idem_key, ` + nulls + `e.created_at, ` + nulls + `1 FROM (` + w + `) e
	ORDER BY e.created_at DESC, e.idem_key DESC LIMIT ` + strconv.Itoa(ListScanBudget-1) + `, 1)`
	args := append(append(append([]any{}, wArgs...), matchArgs...), wArgs...)
	return stmt, args, nil
}

// ops returns the table's operations, by a loose scan of the listing index.
func (s *Store) ops(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT w.op FROM `+s.table+` w FORCE INDEX (`+s.listIndex()+`)`)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ops []string
	for rows.Next() {
		var op []byte
		if err := rows.Scan(&op); err != nil {
			return nil, err
		}
		ops = append(ops, string(op))
	}
	return ops, rows.Err()
}

// List implements idem.AdminStore: newest first, by the index on (op,
// created_at, idem_key), reading at most ListScanBudget records per call
// (see ListScanBudget); without an operation, each operation's newest
// first, merged, at most ListScanBudget in all.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	stmt, args, err := s.ListSQL(ctx, q)
	if err != nil {
		return idem.Page{}, failList("list", err)
	}
	if stmt == "" {
		return idem.Page{}, nil
	}
	rows, err := s.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return idem.Page{}, failList("list", err)
	}
	defer func() { _ = rows.Close() }()
	var (
		p    idem.Page
		edge *idem.Entry
	)
	for rows.Next() {
		var r entryRow
		if err := rows.Scan(append(r.dest(), &r.edge)...); err != nil {
			return idem.Page{}, failList("list", err)
		}
		if r.edge == 1 {
			e := idem.Entry{Created: usTime(r.created.Int64)}
			copy(e.Key.ID[:], r.id)
			edge = &e
			continue
		}
		p.Entries = append(p.Entries, r.entry())
	}
	if err := rows.Err(); err != nil {
		return idem.Page{}, failList("list", err)
	}
	// The statement's order is not the union's: newest first, by key
	// within an instant, as the cursor reads it.
	slices.SortFunc(p.Entries, func(a, b idem.Entry) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(string(b.Key.ID[:]), string(a.Key.ID[:]))
	})
	if n := q.PageLimit(); len(p.Entries) > n {
		p.Entries = p.Entries[:n]
		p.Next = idem.ListCursor(p.Entries[n-1])
	} else if edge != nil {
		p.Next = idem.ListCursor(*edge)
	}
	return p, nil
}

// failList wraps err of a statement without a key, as fail does.
func failList(op string, err error) error {
	if schemaMissing(err) || errNumber(err) == errNoSuchKey {
		return fmt.Errorf("mysqlstore: %s: %w: run the store's Migrate method (or apply mysqlstore.MigrationFiles) on this database: %w",
			op, idem.ErrStoreSchema, err)
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}

// errNoSuchKey is the server's answer to FORCE INDEX of an index that does
// not exist (ER_KEY_DOES_NOT_EXITS): a table migrated to version 1 only.
const errNoSuchKey = 1176

// Stats implements idem.AdminStore. It reads every live record of the
// selected operations (one scan; of one operation's entries of the listing
// index with Op): an operator's question, not a metric to poll (idemotel's
// metrics are).
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	cond := []string{"c.expires_at > " + now}
	var args []any
	if q.ByTenant {
		cond = append(cond, "c.tenant = ?")
		args = append(args, []byte(q.Tenant))
	}
	if q.Op != "" {
		cond = append(cond, "c.op = ?")
		args = append(args, []byte(q.Op))
	}
	rows, err := s.db.QueryContext(ctx, `SELECT c.op, c.status, c.status = 1 AND c.lease_until <= `+now+`, COUNT(*) FROM `+s.table+
		` c WHERE `+strings.Join(cond, " AND ")+` GROUP BY 1, 2, 3`, args...)
	if err != nil {
		return nil, failList("stats", err)
	}
	defer func() { _ = rows.Close() }()
	m := map[idem.Stat]int64{}
	for rows.Next() {
		var (
			op                   []byte
			status, stuck, count int64
		)
		if err := rows.Scan(&op, &status, &stuck, &count); err != nil {
			return nil, failList("stats", err)
		}
		m[idem.Stat{Op: string(op), Status: idem.Status(status), Stuck: stuck == 1}] += count
	}
	if err := rows.Err(); err != nil {
		return nil, failList("stats", err)
	}
	return idem.SortedStats(m), nil
}

// Forget implements idem.AdminStore. In one READ COMMITTED transaction it
// locks the key's row (SELECT … FOR UPDATE: the latest committed version,
// which no claim, Complete or takeover can change until the transaction
// ends), checks that it is live and still holds req's token and status
// (and, for a live lease, that req forces it), and deletes it. A
// transactional claim holds its row while its method runs: Forget waits
// for it at most a second (innodb_lock_wait_timeout, set for the
// statement's session and restored after), then answers idem.ErrLeaseLive,
// forced or not.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	ctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fail("forget", req.Key, err)
	}
	if _, err := conn.ExecContext(ctx, `SET @idem_lock_wait = @@SESSION.innodb_lock_wait_timeout,
	SESSION innodb_lock_wait_timeout = `+strconv.Itoa(forgetLockWait)); err != nil {
		discard(conn)
		return fail("forget", req.Key, err)
	}
	err = s.forget(ctx, conn, req)
	if _, rerr := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = @idem_lock_wait"); rerr != nil {
		discard(conn)
	} else {
		_ = conn.Close()
	}
	if errNumber(err) == errLockWaitTimeout {
		return fail("forget", req.Key, fmt.Errorf("held by an open transaction: %w", idem.ErrLeaseLive))
	}
	if err != nil {
		return fail("forget", req.Key, err)
	}
	return nil
}

func (s *Store) forget(ctx context.Context, conn *sql.Conn, req idem.ForgetRequest) error {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var token, status, leaseUntil, expiresAt, at int64
	err = tx.QueryRowContext(ctx, `SELECT token, status, lease_until, expires_at, `+now+` FROM `+s.table+
		` WHERE idem_key = ? FOR UPDATE`, req.Key.ID[:]).Scan(&token, &status, &leaseUntil, &expiresAt, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.ErrNotFound
	case err != nil:
		return err
	case expiresAt <= at:
		return idem.ErrNotFound
	case idem.Token(token) != req.Token || idem.Status(status) != req.Status:
		return idem.ErrRecordChanged
	case status == int64(idem.StatusProcessing) && leaseUntil > at && !req.Force:
		return idem.ErrLeaseLive
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.table+` WHERE idem_key = ?`, req.Key.ID[:]); err != nil {
		return err
	}
	return tx.Commit()
}

var _ idem.AdminStore = (*Store)(nil)
