package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// conformanceUnit is the suite's lease (the most its fixed one-minute TTL
// allows). The store's clock is advanced by moving the table's instants
// into the past (timeTravel) instead of sleeping, so no lease lapses or
// record expires by the speed of a loaded machine: only a stall of a second
// between two of the suite's statements could.
const conformanceUnit = time.Second

// timeTravel is idemtest's Options.Sleep for a table: d passes on the
// store's clock for every record in it (rows that an open transaction holds
// are skipped: their claim does not lapse while it is open anyway).
func timeTravel(t *testing.T, pool *pgxpool.Pool, table string) func(time.Duration) {
	return func(d time.Duration) {
		_, err := pool.Exec(context.Background(), `UPDATE `+table+` SET
	lease_until = lease_until - $1::interval, expires_at = expires_at - $1::interval,
	sweep_at = sweep_at - $1::interval, created_at = created_at - $1::interval
WHERE ctid = ANY(ARRAY(SELECT ctid FROM `+table+` FOR UPDATE SKIP LOCKED))`, d)
		require.NoError(t, err)
	}
}

func sweepOf(ctx context.Context, s idem.Store, limit int) (int, error) {
	switch s := s.(type) {
	case *pgstore.Store:
		return s.Sweep(ctx, limit)
	case *pgstore.TxStore:
		return s.Sweep(ctx, limit)
	}
	panic("not a pgstore")
}

// TestConformance runs the store conformance suite in lease mode against the
// real server, its clock advanced by timeTravel.
func TestConformance(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	s := pgstore.New(pool, pgstore.WithTable(table))
	idemtest.Run(t, idemtest.Options{
		NewStore: func(t *testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) },
		Sleep:    timeTravel(t, pool, s.Table()),
		Unit:     conformanceUnit,
		Sweep:    sweepOf,
	})
}

// TestConformanceTx runs the suite in transactional mode: the executor's
// cases go through ClaimTx, and a stalled claim (an open transaction) is
// refused instead of taken over.
func TestConformanceTx(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	s := pgstore.New(pool, pgstore.WithTable(table))
	idemtest.Run(t, idemtest.Options{
		NewStore:      func(t *testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) },
		Transactional: true,
		Sleep:         timeTravel(t, pool, s.Table()),
		Unit:          conformanceUnit,
		Sweep:         sweepOf,
	})
}
