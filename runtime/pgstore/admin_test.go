package pgstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// loadRecords fills table with n records of 8 operations (op-0 … op-7),
// created one millisecond apart over the last n milliseconds, in one
// statement: 1 in 5000 PROCESSING past its lease (stuck), 1 in 100
// FAILED_FINAL, the rest SUCCEEDED; all live for a day.
func loadRecords(t *testing.T, pool *pgxpool.Pool, table string, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO `+table+` (key, token, lease_until, expires_at, sweep_at, created_at,
	status, fingerprint, tenant, op, key_text, body)
SELECT sha256(int8send(i)), i, now() - interval '1 hour', now() + interval '1 day', now() + interval '1 day',
	now() - (`+strconv.Itoa(n)+` - i) * interval '1 millisecond',
	CASE WHEN i % 5000 = 7 THEN 1 WHEN i % 100 = 3 THEN 3 ELSE 2 END,
	sha256(int8send(-i)), 'tenant', convert_to('op-' || (i % 8), 'UTF8'), convert_to(i::text, 'UTF8'),
	CASE WHEN i % 5000 = 7 THEN NULL ELSE '{"ok":true}'::bytea END
FROM generate_series(1, `+strconv.Itoa(n)+`) i`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), "VACUUM ANALYZE "+table)
	require.NoError(t, err)
}

// TestListPlan checks that every listing reads the records through the
// index on (op, created_at, key) and never scans the table, and that
// paging a rare status through the scan budget finds exactly its records.
// With -v it prints each plan (EXPLAIN ANALYZE, BUFFERS).
func TestListPlan(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	s := pgstore.New(pool, pgstore.WithTable(table))
	n := testenv.ListPlanRows(t)
	loadRecords(t, pool, s.Table(), n)
	ctx := context.Background()
	for _, c := range testenv.ListPlanQueries() {
		sql, args, err := s.ListSQL(c.Q)
		require.NoError(t, err)
		rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) "+sql, args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		text := strings.Join(plan, "\n")
		t.Logf("%s, %d records:\n%s", c.Name, n, text)
		assert.Contains(t, text, "_op_created_idx", "%s: reads through the listing index", c.Name)
		assert.NotContains(t, text, "Seq Scan", "%s: never scans the table", c.Name)
		_, err = s.List(ctx, c.Q)
		require.NoError(t, err)
	}

	// Every stuck record, page by page: short or empty pages while the
	// budget runs out, then the next, and exactly the stuck ones in all.
	// (Over 2×10⁵ records this reads the whole table a budget at a time:
	// the plans above are what such a run is for.)
	if n > 200000 {
		return
	}
	testenv.CheckStuckPages(t, func(q idem.ListQuery) (idem.Page, error) { return s.List(ctx, q) }, n, pgstore.ListScanBudget)
}

// TestListSecondPageNoLoss: records created at one instant (a takeover
// keeps created_at; a batch may share a timestamp) are paged by key within
// the instant, none lost, none twice.
func TestListSecondPageNoLoss(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	s := pgstore.New(pool, pgstore.WithTable(table))
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO `+s.Table()+` (key, token, lease_until, expires_at, sweep_at, created_at,
	status, fingerprint, tenant, op) SELECT sha256(int8send(i)), i, now(), now() + interval '1 day', now() + interval '1 day',
	'2026-01-01', 2, sha256(int8send(i)), 't', 'same' FROM generate_series(1, 25) i`)
	require.NoError(t, err)
	seen, _ := testenv.ListAll(t, func(q idem.ListQuery) (idem.Page, error) { return s.List(context.Background(), q) },
		idem.ListQuery{Op: "same", Limit: 4}, nil)
	assert.Len(t, seen, 25, "every record once")
}
