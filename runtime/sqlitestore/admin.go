package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The operators' capability, idem.AdminStore
// (docs/decisions/operator-records.md). Lookup is one probe of the primary
// key; List and Stats read the table (no index of their own: a SQLite
// store is one process's, and an index would cost every claim), and
// Forget is one write transaction, like Release.

const adminCols = `key, tenant, op, key_text, status, fingerprint, scheme, token, created_at, expires_at, lease_until,
	body, err_code, err_message, meta`

// scanEntry reads one row of adminCols at now (Unix nanoseconds).
func scanEntry(sc interface{ Scan(...any) error }, now int64) (idem.Entry, error) {
	var (
		e                                   idem.Entry
		id, fp, tenant, op, text, code, msg []byte
		status, scheme, token               int64
		created, expires, leaseUntil        int64
	)
	if err := sc.Scan(&id, &tenant, &op, &text, &status, &fp, &scheme, &token, &created, &expires, &leaseUntil,
		&e.Outcome.Body, &code, &msg, &e.Outcome.Meta); err != nil {
		return idem.Entry{}, err
	}
	copy(e.Key.ID[:], id)
	copy(e.Fingerprint[:], fp)
	e.Key.Tenant, e.Key.Op, e.Key.Text = string(tenant), string(op), string(text)
	e.Status, e.Scheme, e.Token = idem.Status(status), uint32(scheme), idem.Token(token)
	e.Created, e.Expires = time.Unix(0, created), time.Unix(0, expires)
	if e.Status == idem.StatusProcessing {
		e.LeaseUntil = time.Unix(0, leaseUntil)
		e.LeaseLeft = time.Duration(max(leaseUntil-now, 0))
	} else {
		e.Outcome.Status, e.Outcome.ErrCode, e.Outcome.ErrMessage = e.Status, string(code), string(msg)
	}
	return e, nil
}

// Lookup implements idem.AdminStore.
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	now := s.now().UnixNano()
	row := s.db.QueryRowContext(ctx, `SELECT `+adminCols+` FROM idem_records WHERE key = ? AND expires_at > ?`, key.ID[:], now)
	e, err := scanEntry(row, now)
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Entry{}, fail("lookup", key, idem.ErrNotFound)
	}
	if err != nil {
		return idem.Entry{}, fail("lookup", key, err)
	}
	return e, nil
}

// failAll wraps err of a statement without a key, as fail does.
func failAll(op string, err error) error {
	if schemaMissing(err) {
		return fmt.Errorf("sqlitestore: %s: %w: run the store's Migrate method (or apply sqlitestore.Schema) on this database: %w",
			op, idem.ErrStoreSchema, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// List implements idem.AdminStore, newest first, by one query over the
// table.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	now := s.now().UnixNano()
	cond := []string{"expires_at > ?"}
	args := []any{now}
	if q.Cursor != "" {
		ct, cid, err := idem.ParseListCursor(q.Cursor)
		if err != nil {
			return idem.Page{}, failAll("list", err)
		}
		cond = append(cond, "(created_at < ? OR created_at = ? AND key < ?)")
		args = append(args, ct.UnixNano(), ct.UnixNano(), cid[:])
	}
	if q.ByTenant {
		cond, args = append(cond, "tenant = ?"), append(args, []byte(q.Tenant))
	}
	if q.Op != "" {
		cond, args = append(cond, "op = ?"), append(args, []byte(q.Op))
	}
	if q.Status != 0 {
		cond, args = append(cond, "status = ?"), append(args, int64(q.Status))
	}
	if q.Stuck {
		cond, args = append(cond, "status = 1 AND lease_until <= ?"), append(args, now)
	}
	if q.MaxAge > 0 {
		cond, args = append(cond, "created_at >= ?"), append(args, now-int64(q.MaxAge))
	}
	if q.MinAge > 0 {
		cond, args = append(cond, "created_at <= ?"), append(args, now-int64(q.MinAge))
	}
	n := q.PageLimit()
	args = append(args, n+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+adminCols+` FROM idem_records WHERE `+strings.Join(cond, " AND ")+
		` ORDER BY created_at DESC, key DESC LIMIT ?`, args...)
	if err != nil {
		return idem.Page{}, failAll("list", err)
	}
	defer func() { _ = rows.Close() }()
	var p idem.Page
	for rows.Next() {
		e, err := scanEntry(rows, now)
		if err != nil {
			return idem.Page{}, failAll("list", err)
		}
		p.Entries = append(p.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return idem.Page{}, failAll("list", err)
	}
	if len(p.Entries) > n {
		p.Entries = p.Entries[:n]
		p.Next = idem.ListCursor(p.Entries[n-1])
	}
	return p, nil
}

// Stats implements idem.AdminStore by one query over the table.
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	now := s.now().UnixNano()
	cond := []string{"expires_at > ?"}
	args := []any{now, now} // the stuck test's, the condition's
	if q.ByTenant {
		cond, args = append(cond, "tenant = ?"), append(args, []byte(q.Tenant))
	}
	if q.Op != "" {
		cond, args = append(cond, "op = ?"), append(args, []byte(q.Op))
	}
	rows, err := s.db.QueryContext(ctx, `SELECT op, status, status = 1 AND lease_until <= ?, count(*) FROM idem_records WHERE `+
		strings.Join(cond, " AND ")+` GROUP BY 1, 2, 3`, args...)
	if err != nil {
		return nil, failAll("stats", err)
	}
	defer func() { _ = rows.Close() }()
	m := map[idem.Stat]int64{}
	for rows.Next() {
		var (
			op        []byte
			status, n int64
			stuck     bool
		)
		if err := rows.Scan(&op, &status, &stuck, &n); err != nil {
			return nil, failAll("stats", err)
		}
		m[idem.Stat{Op: string(op), Status: idem.Status(status), Stuck: stuck}] += n
	}
	if err := rows.Err(); err != nil {
		return nil, failAll("stats", err)
	}
	return idem.SortedStats(m), nil
}

// Forget implements idem.AdminStore: in one write transaction, it deletes
// the live record if it still holds req's token and status.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	err := s.write(ctx, func(conn *sql.Conn, now int64) error {
		r, ok, err := load(ctx, conn, req.Key)
		switch {
		case err != nil:
			return err
		case !ok || r.expiresAt <= now:
			return idem.ErrNotFound
		case r.rec.Token != req.Token || r.rec.Status != req.Status:
			return idem.ErrRecordChanged
		case r.rec.Status == idem.StatusProcessing && r.leaseUntil > now && !req.Force:
			return idem.ErrLeaseLive
		}
		_, err = conn.ExecContext(ctx, `DELETE FROM idem_records WHERE key = ?`, req.Key.ID[:])
		return err
	})
	if err != nil {
		return fail("forget", req.Key, err)
	}
	return nil
}

var _ idem.AdminStore = (*Store)(nil)
