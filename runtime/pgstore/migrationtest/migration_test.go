package migrationtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// tool applies pgstore's migration files with one migration tool.
type tool struct {
	name string
	// open returns the tool's commands on the database of cfg.
	open func(t *testing.T, cfg *pgx.ConnConfig) commands
}

// commands are a tool's operations on one database; each is safe to call
// more than once.
type commands struct {
	up   func() error // applies every version not applied yet
	down func() error // undoes every applied version
	// unfail is the operator's step after a failed first version once its
	// cause is fixed: the tool forgets that the version was attempted.
	unfail func() error
}

var tools = []tool{
	{name: "goose", open: openGoose},
	{name: "golang-migrate", open: openMigrate},
}

// openGoose applies pgstore.GooseMigrationFiles with goose's provider.
func openGoose(t *testing.T, cfg *pgx.ConnConfig) commands {
	db := sqlDB(t, cfg)
	p, err := goose.NewProvider(goose.DialectPostgres, db, pgstore.GooseMigrationFiles())
	require.NoError(t, err)
	ctx := context.Background()
	return commands{
		up:   func() error { _, err := p.Up(ctx); return err },
		down: func() error { _, err := p.DownTo(ctx, 0); return err },
		// goose runs a version in a transaction with its record: a failed
		// version left nothing behind.
		unfail: func() error { return nil },
	}
}

// openMigrate applies pgstore.MigrationFiles with golang-migrate (iofs
// source, pgx v5 driver).
func openMigrate(t *testing.T, cfg *pgx.ConnConfig) commands {
	src, err := iofs.New(pgstore.MigrationFiles(), ".")
	require.NoError(t, err)
	drv, err := migratepgx.WithInstance(sqlDB(t, cfg), &migratepgx.Config{})
	require.NoError(t, err)
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = m.Close() })
	ignoreNoChange := func(err error) error {
		if errors.Is(err, migrate.ErrNoChange) {
			return nil
		}
		return err
	}
	return commands{
		up:   func() error { return ignoreNoChange(m.Up()) },
		down: func() error { return ignoreNoChange(m.Down()) },
		// A failed version stays marked dirty; `migrate force -1` (no
		// version applied) clears it.
		unfail: func() error { return m.Force(-1) },
	}
}

func sqlDB(t *testing.T, cfg *pgx.ConnConfig) *sql.DB {
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newDatabase creates a database of its own on the test server (the
// migrations use the fixed table names, which other tests may use) and drops
// it when the test ends; it returns a pool on it.
func newDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	adminCfg := cfg.ConnConfig.Copy()
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	require.NoError(t, err)
	defer func() { _ = admin.Close(ctx) }()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "idem_migr_" + hex.EncodeToString(b)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(ctx, adminCfg)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer func() { _ = c.Close(ctx) }()
		if _, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 80
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// tables reports whether idem_records and idem_records_archive exist.
func tables(t *testing.T, pool *pgxpool.Pool) (records, archive bool) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT to_regclass('idem_records') IS NOT NULL, to_regclass('idem_records_archive') IS NOT NULL`).
		Scan(&records, &archive))
	return records, archive
}

// timeTravel is idemtest's Options.Sleep for idem_records: d passes on the
// store's clock for every record not held by an open transaction (as in
// pgstore's conformance tests).
func timeTravel(t *testing.T, pool *pgxpool.Pool) func(time.Duration) {
	return func(d time.Duration) {
		_, err := pool.Exec(context.Background(), `UPDATE idem_records SET
	lease_until = lease_until - $1::interval, expires_at = expires_at - $1::interval,
	sweep_at = sweep_at - $1::interval, created_at = created_at - $1::interval
WHERE ctid = ANY(ARRAY(SELECT ctid FROM idem_records FOR UPDATE SKIP LOCKED))`, d)
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

// conformance runs idemtest on the default tables of pool, in lease mode
// and in transactional mode (with the archive table of version 2).
func conformance(t *testing.T, pool *pgxpool.Pool) {
	t.Run("Lease", func(t *testing.T) {
		idemtest.Run(t, idemtest.Options{
			NewStore: func(t *testing.T) idem.Store { return pgstore.New(pool) },
			Sleep:    timeTravel(t, pool),
			Unit:     time.Second,
			Sweep:    sweepOf,
		})
	})
	t.Run("Tx", func(t *testing.T) {
		idemtest.Run(t, idemtest.Options{
			NewStore: func(t *testing.T) idem.Store {
				return pgstore.NewTx(pool, pgstore.WithArchive("idem_records_archive"))
			},
			Transactional: true,
			Sleep:         timeTravel(t, pool),
			Unit:          time.Second,
			Sweep:         sweepOf,
		})
	})
}

// TestToolsApplyMigrations applies the migration files with each tool: up
// (both tables exist, Migrate on top of them is a no-op), the conformance
// suite in both modes on the result, down (both tables gone), up again (a
// store works on the new tables).
func TestToolsApplyMigrations(t *testing.T) {
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			ctx := context.Background()
			pool := newDatabase(t)
			c := tl.open(t, pool.Config().ConnConfig)
			up, down := c.up, c.down

			require.NoError(t, up())
			records, archive := tables(t, pool)
			require.True(t, records && archive, "after up: idem_records %v, idem_records_archive %v", records, archive)
			require.NoError(t, up(), "a second up is a no-op")
			require.NoError(t, pgstore.New(pool, pgstore.WithArchive("idem_records_archive")).Migrate(ctx),
				"Migrate on tables a tool created")

			conformance(t, pool)

			require.NoError(t, down())
			records, archive = tables(t, pool)
			assert.False(t, records, "after down: idem_records exists")
			assert.False(t, archive, "after down: idem_records_archive exists")

			require.NoError(t, up())
			records, archive = tables(t, pool)
			require.True(t, records && archive, "after up again: idem_records %v, idem_records_archive %v", records, archive)
			s := pgstore.New(pool)
			k, err := idem.NewKey("t", "migr.Op", "1")
			require.NoError(t, err)
			cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour})
			require.NoError(t, err)
			require.True(t, cl.Claimed)
		})
	}
}

// TestToolsRefuseV01Table checks that a tool applying version 1 to a table
// of v0.1's layout fails, naming the table and Migrate, instead of leaving a
// table pgstore cannot use; after Migrate upgrades it, the tool applies the
// migrations and the v0.1 record is still there.
func TestToolsRefuseV01Table(t *testing.T) {
	v01, err := os.ReadFile("../testdata/schema_v01.sql")
	require.NoError(t, err)
	for _, tl := range tools {
		t.Run(tl.name, func(t *testing.T) {
			ctx := context.Background()
			pool := newDatabase(t)
			_, err := pool.Exec(ctx, string(v01))
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO idem_records (tenant, op, key, fingerprint, status, token, lease_until, expires_at)
VALUES ('t', 'op', decode(repeat('ab', 32), 'hex'), decode(repeat('cd', 32), 'hex'), 2, 1, now(), now() + interval '1 hour')`)
			require.NoError(t, err)

			c := tl.open(t, pool.Config().ConnConfig)
			err = c.up()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "table idem_records has the layout of idemgen v0.1")
			assert.Contains(t, err.Error(), "pgstore.Store).Migrate")

			require.NoError(t, pgstore.New(pool).Migrate(ctx))
			require.NoError(t, c.unfail())
			require.NoError(t, c.up())
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM idem_records WHERE tenant = 't'::bytea").Scan(&n))
			assert.Equal(t, 1, n)
		})
	}
}
