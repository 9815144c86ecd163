package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestCompleteThroughReadOnlyDatabase is issue 37's report on a real
// server: a pgstore.Store on a database of its own that an operator
// switches read-only (ALTER DATABASE ... SET default_transaction_read_only
// = on, the pool reconnecting as a client of a demoted primary or a
// standby does) for 3 s, by the executor's clock, while a lease-mode call
// stores its outcome under a 5 s lease. PostgreSQL answers 25006 (cannot
// execute UPDATE in a read-only transaction); the rest is
// idemtest.CompleteThroughOutage's: the method runs exactly once.
func TestCompleteThroughReadOnlyDatabase(t *testing.T) {
	ctx := t.Context()
	admin := newPool(t, 2, nil)
	db := "idem_ro_" + randHex(6)
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
		assert.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Database = db
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	require.NoError(t, store.Migrate(ctx))

	readOnly := func(on bool) func(context.Context) error {
		q := "ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " RESET default_transaction_read_only"
		if on {
			q = "ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " SET default_transaction_read_only = on"
		}
		return func(ctx context.Context) error {
			if _, err := admin.Exec(ctx, q); err != nil {
				return err
			}
			pool.Reset() // the store's sessions start again, with the database's setting
			return nil
		}
	}
	idemtest.CompleteThroughOutage(t, idemtest.StoreOutage{
		Store: store,
		Begin: readOnly(true),
		End:   readOnly(false),
		Span:  3 * time.Second,
		Lease: 5 * time.Second,
		CheckFirst: func(t testing.TB, err error) {
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe, "the server's own answer")
			assert.Equal(t, "25006", pe.Code, pe.Message)
		},
	})
}
