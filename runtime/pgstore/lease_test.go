package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestLeaseStall: a worker that stalls past its lease in lease mode. The
// second worker takes the key over and stores its outcome; the first one's
// Complete gets ErrLeaseLost; retries replay the second's outcome.
func TestLeaseStall(t *testing.T) {
	pool := newPool(t, 8, nil)
	table := newTable(t, pool)
	var events sync.Map
	ex := idem.NewExecutor(pgstore.New(pool, pgstore.WithTable(table)), idem.WithObserver(func(ev idem.Event) {
		events.Store(ev.Kind, true)
	}), idem.SingleTenant())
	ledger := newLedger(t, pool)
	svc := NewIdempotentLedger(ledger, ex)
	m := idemLedgerCredit
	m.TTL, m.Lease, m.Wait = time.Hour, time.Minute, 0
	req := CreditRequest{ID: "stall-" + randHex(4), Amount: 5}

	stalled, resume := make(chan struct{}), make(chan struct{})
	first := true
	ledger.hook = func(context.Context, pgx.Tx) error {
		if first {
			first = false
			close(stalled)
			<-resume
		}
		return nil
	}
	var zombie Entry
	var zombieErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		zombie, zombieErr = svc.credit(context.Background(), &m, req)
	}()
	<-stalled
	_, err := svc.credit(context.Background(), &m, req)
	require.ErrorIs(t, err, idem.ErrInProgress, "inside the lease, a duplicate is in progress")
	timeTravel(t, pool, pgstore.New(pool, pgstore.WithTable(table)).Table())(m.Lease + time.Second)
	heir, err := svc.credit(context.Background(), &m, req)
	require.NoError(t, err, "the lapsed lease is taken over")
	close(resume)
	<-done
	require.ErrorIs(t, zombieErr, idem.ErrLeaseLost, "the stalled worker's Complete is fenced off")
	assert.Zero(t, zombie)

	again, err := svc.credit(context.Background(), &m, req)
	require.NoError(t, err)
	assert.Equal(t, heir, again, "the stored outcome is the second worker's")
	// Lease mode cannot undo the stalled worker's own write: both ran.
	assert.Len(t, ledger.rows(t)[req.ID], 2)
	_, took := events.Load(idem.EventTakenOver)
	assert.True(t, took, "the observer saw the takeover")
	_, lost := events.Load(idem.EventLeaseLost)
	assert.True(t, lost, "the observer saw the lease loss")
}

// TestConformanceLockTimeout runs the suite with WithLockTimeout, whose
// statements carry SET LOCAL lock_timeout in the same round trip.
func TestConformanceLockTimeout(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(t *testing.T) idem.Store {
			return pgstore.New(pool, pgstore.WithTable(table), pgstore.WithLockTimeout(2*time.Second))
		},
		Sleep: timeTravel(t, pool, pgstore.New(pool, pgstore.WithTable(table)).Table()),
		Unit:  conformanceUnit,
		Sweep: sweepOf,
	})
}

func TestTableNames(t *testing.T) {
	for _, ok := range []string{"idem_records", "a", "_x1", "public.idem", "s_1.t_2", strings.Repeat("a", 63)} {
		assert.NotPanics(t, func() { pgstore.New(nil, pgstore.WithTable(ok)) }, ok)
	}
	for _, bad := range []string{"", "1abc", "a-b", `a"b`, "a;drop table x", "a.b.c", "a b", ".a", "a.", strings.Repeat("a", 64), "é"} {
		assert.Panics(t, func() { pgstore.New(nil, pgstore.WithTable(bad)) }, bad)
		assert.Panics(t, func() { pgstore.New(nil, pgstore.WithArchive(bad)) }, bad)
	}
	s := pgstore.New(nil, pgstore.WithTable("billing.idem"), pgstore.WithArchive("audit.idem_old"))
	assert.Equal(t, `"billing"."idem"`, s.Table())
	sql := s.MigrationSQL()
	assert.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "billing"."idem" (`)
	assert.Contains(t, sql, `CREATE INDEX IF NOT EXISTS "idem_sweep_at_idx" ON "billing"."idem" (sweep_at)`)
	assert.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "audit"."idem_old" (`)
	assert.Contains(t, sql, `LIKE "billing"."idem",`)
	assert.NotContains(t, sql, "idem_records")
}

// TestMigrateConcurrent: Migrate is idempotent and safe when several
// processes run it at once, including into a new schema.
func TestMigrateConcurrent(t *testing.T) {
	pool := newPool(t, 10, nil)
	schema := "idem_s_" + randHex(4)
	_, err := pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	s := pgstore.New(pool, pgstore.WithTable(schema+".records"), pgstore.WithArchive(schema+".archive"))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Migrate(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, s.Migrate(context.Background()), "again")
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&n))
	assert.Equal(t, 2, n)
	k := key(t, "t", "migrated")
	c, err := s.Claim(context.Background(), claimReq(k, "p", time.Second, time.Minute))
	require.NoError(t, err)
	assert.True(t, c.Claimed, fmt.Sprint(c))
}
