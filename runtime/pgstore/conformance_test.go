package pgstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
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
	down, unmigrated := unusable(pool, newLease)
	idemtest.Run(t, idemtest.Options{
		NewStore:   func(t *testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) },
		Sleep:      timeTravel(t, pool, s.Table()),
		Unit:       conformanceUnit,
		Sweep:      sweepOf,
		Down:       down,
		Unmigrated: unmigrated,
	})
}

// TestConformanceTx runs the suite in transactional mode: the executor's
// cases go through ClaimTx, and a stalled claim (an open transaction) is
// refused instead of taken over.
func TestConformanceTx(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	s := pgstore.New(pool, pgstore.WithTable(table))
	down, unmigrated := unusable(pool, newTx)
	idemtest.Run(t, idemtest.Options{
		NewStore:      func(t *testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) },
		Transactional: true,
		Sleep:         timeTravel(t, pool, s.Table()),
		Unit:          conformanceUnit,
		Sweep:         sweepOf,
		Down:          down,
		Unmigrated:    unmigrated,
		BreakTx:       testenv.BreakPGTx(pool),
	})
}

// closedAddr returns an address of this machine on which nothing listens:
// a server that is down.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// downPool is a pool whose server is down.
func downPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+closedAddr(t)+"/idem?sslmode=disable&connect_timeout=5")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// unusable returns idemtest's Options.Down and Options.Unmigrated for the
// stores mode builds with opts: a server that is down, and a table that was
// never migrated on the live one.
func unusable(pool *pgxpool.Pool, newStore func(*pgxpool.Pool, ...pgstore.Option) idem.Store, opts ...pgstore.Option) (down, unmigrated func(t *testing.T) idem.Store) {
	down = func(t *testing.T) idem.Store { return newStore(downPool(t), opts...) }
	unmigrated = func(t *testing.T) idem.Store {
		return newStore(pool, append(append([]pgstore.Option(nil), opts...), pgstore.WithTable("idem_never_migrated_"+randHex(4)))...)
	}
	return down, unmigrated
}

func newLease(pool *pgxpool.Pool, opts ...pgstore.Option) idem.Store {
	return pgstore.New(pool, opts...)
}
func newTx(pool *pgxpool.Pool, opts ...pgstore.Option) idem.Store {
	return pgstore.NewTx(pool, opts...)
}

// TestOutdatedSchema: a table of v0.1's layout, never upgraded by Migrate,
// is named as an outdated schema, in both modes: the error wraps
// idem.ErrStoreSchema and idem.ErrStoreUnavailable, names Migrate, and the
// method does not run.
func TestOutdatedSchema(t *testing.T) {
	pool := newPool(t, 8, nil)
	for name, newStore := range map[string]func(*pgxpool.Pool, ...pgstore.Option) idem.Store{"lease": newLease, "tx": newTx} {
		t.Run(name, func(t *testing.T) {
			table, archive := "idem_v01_"+randHex(4), "idem_v01_arch_"+randHex(4)
			v01Table(t, pool, table, archive, key(t, "other", "x"), fp("p"))
			ex := idem.NewExecutor(newStore(pool, pgstore.WithTable(table)), idem.SingleTenant())
			var k idem.KeyParts
			k.String("id", "order-1")
			var h idem.Hasher
			h.String("p")
			ran := false
			_, err := idem.Do(t.Context(), ex, &idem.Method{Op: "test.Outdated", TTL: time.Minute}, &k, &h,
				func(context.Context) (int, error) { ran = true; return 1, nil })
			require.ErrorIs(t, err, idem.ErrStoreSchema)
			require.ErrorIs(t, err, idem.ErrStoreUnavailable)
			require.Contains(t, err.Error(), "Migrate")
			require.False(t, ran)
		})
	}
}
