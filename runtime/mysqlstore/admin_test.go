package mysqlstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// digits is a derived table of the digits 0 to 9.
const digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 " +
	"UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"

// loadRecords fills table with n (at most 10⁷) records of 8 operations
// (op-0 … op-7), created one millisecond apart over the last n
// milliseconds, in one statement per 10⁵: 1 in 5000 PROCESSING past its
// lease (stuck), 1 in 100 FAILED_FINAL, the rest SUCCEEDED; all live for a
// day.
func loadRecords(t *testing.T, db *sql.DB, table string, n int) {
	t.Helper()
	const step = 100000
	for from := 0; from < n; from += step {
		// i = from + 1 … from + step, by five digits.
		_, err := db.Exec(`INSERT INTO `+table+` (idem_key, token, lease_until, expires_at, created_at, status,
	fingerprint, tenant, op, key_text, body)
SELECT UNHEX(SHA2(i, 256)), i, t.now - 3600000000, t.now + 86400000000, t.now - (? - i) * 1000,
	CASE WHEN i % 5000 = 7 THEN 1 WHEN i % 100 = 3 THEN 3 ELSE 2 END,
	UNHEX(SHA2(-i, 256)), 'tenant', CONCAT('op-', i % 8), CAST(i AS CHAR),
	CASE WHEN i % 5000 = 7 THEN NULL ELSE '{"ok":true}' END
FROM (SELECT ? + 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i
	FROM `+digits+` a, `+digits+` b, `+digits+` c, `+digits+` e, `+digits+` f) s,
	(SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now) t
WHERE i <= ?`, n, from, n)
		require.NoError(t, err)
	}
	_, err := db.Exec("ANALYZE TABLE " + table)
	require.NoError(t, err)
}

// explain returns the rows of EXPLAIN stmt as maps of column to value.
func explain(t *testing.T, db *sql.DB, stmt string, args ...any) []map[string]string {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+stmt, args...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		m := map[string]string{}
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	return out
}

// analyze returns MariaDB's ANALYZE FORMAT=JSON of stmt (the plan as run,
// with the rows each step read, r_rows), or "" on a server without it.
func analyze(t *testing.T, db *sql.DB, stmt string, args ...any) string {
	var js string
	if err := db.QueryRow("ANALYZE FORMAT=JSON "+stmt, args...).Scan(&js); err != nil {
		t.Logf("ANALYZE FORMAT=JSON: %v", err)
		return ""
	}
	return js
}

// readRows sums r_rows of every table access named table in MariaDB's
// ANALYZE FORMAT=JSON output, by alias: the rows each one read.
func readRows(js string) map[string]float64 {
	out := map[string]float64{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if tb, ok := v["table"].(map[string]any); ok {
				name, _ := tb["table_name"].(string)
				loops, _ := tb["r_loops"].(float64)
				rows, _ := tb["r_rows"].(float64)
				if !strings.HasPrefix(name, "<") {
					out[name] += loops * rows
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	// MariaDB prints a NUL of a binary constant as \0, which JSON has not.
	js = strings.ReplaceAll(js, `\0`, `\u0000`)
	var v any
	if json.Unmarshal([]byte(js), &v) == nil {
		walk(v)
	}
	return out
}

// TestListPlan checks that every listing reads the records through the
// listing index (op, created_at, idem_key), never scanning the table, that
// the operations are found by a loose scan of it, and that paging a rare
// status through the scan budget finds exactly its records. With -v it
// prints each plan and, on MariaDB, the rows each table access read
// (ANALYZE FORMAT=JSON).
func TestListPlan(t *testing.T) {
	db := newDB(t, 4)
	table := newTable(t, db)
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	n := testenv.ListPlanRows(t)
	start := time.Now()
	loadRecords(t, db, s.Table(), n)
	t.Logf("loaded %d records in %v", n, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()

	ops := explain(t, db, "SELECT DISTINCT w.op FROM "+s.Table()+" w FORCE INDEX (`"+table+"_op_created_idx`)")
	require.Len(t, ops, 1)
	t.Logf("operations: %v", ops[0])
	assert.Contains(t, ops[0]["Extra"], "Using index for group-by", "the operations by a loose index scan")

	for _, c := range testenv.ListPlanQueries() {
		stmt, args, err := s.ListSQL(ctx, c.Q)
		require.NoError(t, err)
		plan := explain(t, db, stmt, args...)
		var lines []string
		for _, r := range plan {
			lines = append(lines, strings.Join([]string{r["id"], r["select_type"], r["table"], r["type"], r["key"], r["rows"], r["Extra"]}, " | "))
			switch r["table"] {
			case "w": // the window: the listing index, as a range of one operation
				assert.Equal(t, table+"_op_created_idx", r["key"], "%s: the window reads the listing index", c.Name)
				assert.Contains(t, r["Extra"], "Using index", "%s: the window reads the index alone", c.Name)
			case "c": // the rows of the window's entries, one probe each
				assert.Equal(t, "eq_ref", r["type"], "%s: rows read by their key", c.Name)
			}
			if !strings.HasPrefix(r["table"], "<") {
				assert.NotEqual(t, "ALL", r["type"], "%s: never scans the table (%s)", c.Name, r["table"])
			}
		}
		t.Logf("%s, %d records:\n%s", c.Name, n, strings.Join(lines, "\n"))
		if js := analyze(t, db, stmt, args...); js != "" {
			t.Logf("%s: rows read by table: %v", c.Name, readRows(js))
			if testing.Verbose() && os.Getenv("IDEM_LIST_PLAN_JSON") != "" {
				t.Logf("%s", js)
			}
		}
		start := time.Now()
		_, err = s.List(ctx, c.Q)
		require.NoError(t, err)
		t.Logf("%s: List took %v", c.Name, time.Since(start).Round(time.Microsecond))
	}

	// Every stuck record, page by page: short or empty pages while the
	// budget runs out, then the next, and exactly the stuck ones in all.
	if n > 200000 {
		return
	}
	testenv.CheckStuckPages(t, func(q idem.ListQuery) (idem.Page, error) { return s.List(ctx, q) }, n, mysqlstore.ListScanBudget)
}

// TestListSecondPageNoLoss: records created at one instant (a takeover
// keeps created_at; a batch may share a timestamp) are paged by key within
// the instant, none lost, none twice.
func TestListSecondPageNoLoss(t *testing.T) {
	db := newDB(t, 4)
	table := newTable(t, db)
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	_, err := db.Exec(`INSERT INTO ` + s.Table() + ` (idem_key, token, lease_until, expires_at, created_at, status,
	fingerprint, tenant, op, key_text)
SELECT UNHEX(SHA2(i, 256)), i, 0, 9000000000000000, 1767225600000000, 2, UNHEX(SHA2(i, 256)), 't', 'same', ''
FROM (SELECT 1 + a.d + 10 * b.d AS i FROM ` + digits + ` a, ` + digits + ` b) s WHERE i <= 25`)
	require.NoError(t, err)
	seen, _ := testenv.ListAll(t, func(q idem.ListQuery) (idem.Page, error) { return s.List(context.Background(), q) },
		idem.ListQuery{Op: "same", Limit: 4}, nil)
	assert.Len(t, seen, 25, "every record once")
}

// TestForgetTransactionalClaim: a transactional claim holds its row while
// its method runs; Forget does not hang on it (it waits at most a second in
// the server) and answers ErrLeaseLive, forced or not, and leaves the
// session's lock wait timeout as it found it. Once the claim committed its
// outcome, the outcome is forgotten as any other.
func TestForgetTransactionalClaim(t *testing.T) {
	db := newDB(t, 3)
	table := newTable(t, db)
	s := mysqlstore.NewTx(db, mysqlstore.WithTable(table))
	ctx := context.Background()
	k, err := idem.NewKey("t", "billing.Charge", "order-7")
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Token: 9, Lease: time.Minute, TTL: time.Hour}
	c, txn, err := s.ClaimTx(ctx, req, 0)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NotNil(t, txn)

	// The claim's row is not committed: invisible to a lookup.
	_, err = s.Lookup(ctx, k)
	assert.ErrorIs(t, err, idem.ErrNotFound)
	for _, force := range []bool{false, true} {
		err = s.Forget(ctx, idem.ForgetRequest{Key: k, Token: 9, Status: idem.StatusProcessing, Force: force})
		require.ErrorIs(t, err, idem.ErrLeaseLive, "force=%v: bounded by the server's lock wait, not the client's timeout", force)
		assert.Contains(t, err.Error(), "held by an open transaction")
		assert.Contains(t, err.Error(), k.Hex())
	}
	// The pool's other connections kept their lock wait timeout.
	var conns []*sql.Conn
	for range 2 {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, conn)
		var lw int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&lw))
		assert.NotEqual(t, 1, lw, "Forget restored the session's innodb_lock_wait_timeout")
	}
	for _, conn := range conns {
		require.NoError(t, conn.Close())
	}

	require.NoError(t, txn.Complete(ctx, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}, time.Hour, false))
	e, err := s.Lookup(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, idem.StatusSucceeded, e.Status)
	require.NoError(t, s.Forget(ctx, idem.ForgetRequest{Key: k, Token: 9, Status: idem.StatusSucceeded}))
	c, txn, err = s.ClaimTx(ctx, idem.ClaimRequest{Key: k, Token: 10, Lease: time.Minute, TTL: time.Hour}, 0)
	require.NoError(t, err)
	assert.True(t, c.Claimed, "the forgotten key runs again")
	require.NoError(t, txn.Release(ctx))
}

// TestAdminUnmigrated: a table that was never migrated, or migrated to
// version 1 only (no listing index), is a schema error naming Migrate.
func TestAdminUnmigrated(t *testing.T) {
	db := newDB(t, 2)
	ctx := context.Background()
	never := mysqlstore.New(db, mysqlstore.WithTable("idem_never_migrated_"+randHex(4)))
	v1 := "idem_v1_" + randHex(4)
	old := mysqlstore.New(db, mysqlstore.WithTable(v1))
	_, err := db.Exec(old.MigrationSQL())
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + v1) })
	k, err := idem.NewKey("t", "op", "k")
	require.NoError(t, err)
	for name, s := range map[string]*mysqlstore.Store{"never migrated": never, "version 1": old} {
		_, err := s.List(ctx, idem.ListQuery{Op: "op"})
		assert.ErrorIs(t, err, idem.ErrStoreSchema, "%s: list", name)
		_, err = s.List(ctx, idem.ListQuery{})
		assert.ErrorIs(t, err, idem.ErrStoreSchema, "%s: list every operation", name)
		if err != nil {
			assert.Contains(t, err.Error(), "Migrate")
		}
	}
	_, err = never.Lookup(ctx, k)
	assert.ErrorIs(t, err, idem.ErrStoreSchema)
	_, err = never.Stats(ctx, idem.StatsQuery{})
	assert.ErrorIs(t, err, idem.ErrStoreSchema)
	assert.ErrorIs(t, never.Forget(ctx, idem.ForgetRequest{Key: k, Token: 1, Status: idem.StatusSucceeded}), idem.ErrStoreSchema)
	// Migrate adds the index to a table of version 1, and runs again
	// without a change.
	require.NoError(t, old.Migrate(ctx))
	require.NoError(t, old.Migrate(ctx))
	_, err = old.List(ctx, idem.ListQuery{Op: "op"})
	assert.NoError(t, err)
}
