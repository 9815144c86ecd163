package migrationtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// newDatabase creates a database of its own on the test server (the
// migrations use the fixed table name) and drops it when the test ends.
func newDatabase(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	require.NoError(t, err)
	admin := open(t, cfg)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "idem_migr_" + hex.EncodeToString(b)
	_, err = admin.Exec("CREATE DATABASE " + name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg = cfg.Clone()
	cfg.DBName = name
	return open(t, cfg)
}

func open(t *testing.T, cfg *mysql.Config) *sql.DB {
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// works claims, completes and replays one key on the table the tool made.
func works(t *testing.T, db *sql.DB) {
	t.Helper()
	s := mysqlstore.New(db)
	k, err := idem.NewKey("t", "migr.Op", "k")
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour}
	c, err := s.Claim(t.Context(), req)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NoError(t, s.Complete(t.Context(), k, 1, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}, time.Hour))
	req.Token = 2
	c, err = s.Claim(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, []byte("ok"), c.Record.Outcome.Body)
}

// listIndexExists reports whether the listing index of version 2 exists.
func listIndexExists(t *testing.T, db *sql.DB) bool {
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
	AND TABLE_NAME = 'idem_records' AND INDEX_NAME = 'idem_records_op_created_idx'`).Scan(&n))
	return n > 0
}

func tableExists(t *testing.T, db *sql.DB) bool {
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idem_records'").Scan(&n))
	return n == 1
}

// TestGoose: goose applies mysqlstore.GooseMigrationFiles (the table and
// the listing index), the store works on the table, Migrate afterwards
// changes nothing, and down drops them.
func TestGoose(t *testing.T) {
	db := newDatabase(t)
	p, err := goose.NewProvider(goose.DialectMySQL, db, mysqlstore.GooseMigrationFiles())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.True(t, listIndexExists(t, db), "version 2: the listing index")
	works(t, db)
	require.NoError(t, mysqlstore.New(db).Migrate(ctx), "Migrate runs the same statement: a no-op on the tool's table")
	_, err = p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.False(t, tableExists(t, db))
}

// TestGolangMigrate: golang-migrate applies mysqlstore.MigrationFiles
// (iofs source, its mysql driver), the store works on the table, and down
// drops it.
func TestGolangMigrate(t *testing.T) {
	db := newDatabase(t)
	src, err := iofs.New(mysqlstore.MigrationFiles(), ".")
	require.NoError(t, err)
	drv, err := migratemysql.WithInstance(db, &migratemysql.Config{})
	require.NoError(t, err)
	m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
	require.NoError(t, err)
	require.NoError(t, m.Up())
	require.True(t, listIndexExists(t, db), "version 2: the listing index")
	works(t, db)
	require.NoError(t, mysqlstore.New(db).Migrate(context.Background()))
	if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		require.NoError(t, err)
	}
	require.False(t, tableExists(t, db))
}

// TestAdoptAfterMigrate: a database that Migrate set up adopts a migration
// tool by marking versions 1 and 2 applied, as docs/decisions/mysqlstore.md
// and Store.Migrate advise: running them instead fails on version 2 (MySQL's
// CREATE INDEX has no IF NOT EXISTS, and Migrate made the index), which is
// why the advice is to mark them.
func TestAdoptAfterMigrate(t *testing.T) {
	ctx := context.Background()
	t.Run("goose", func(t *testing.T) {
		db := newDatabase(t)
		require.NoError(t, mysqlstore.New(db).Migrate(ctx))
		p, err := goose.NewProvider(goose.DialectMySQL, db, mysqlstore.GooseMigrationFiles())
		require.NoError(t, err)
		_, err = p.Up(ctx)
		require.Error(t, err, "running version 2 again meets the index Migrate made")

		db = newDatabase(t)
		require.NoError(t, mysqlstore.New(db).Migrate(ctx))
		p, err = goose.NewProvider(goose.DialectMySQL, db, mysqlstore.GooseMigrationFiles())
		require.NoError(t, err)
		_, err = p.GetDBVersion(ctx) // creates goose's version table
		require.NoError(t, err)
		_, err = db.Exec("INSERT INTO goose_db_version (version_id, is_applied) VALUES (1, TRUE), (2, TRUE)")
		require.NoError(t, err)
		_, err = p.Up(ctx)
		require.NoError(t, err)
		pending, err := p.HasPending(ctx)
		require.NoError(t, err)
		require.False(t, pending)
		works(t, db)
	})
	t.Run("golang-migrate", func(t *testing.T) {
		db := newDatabase(t)
		require.NoError(t, mysqlstore.New(db).Migrate(ctx))
		src, err := iofs.New(mysqlstore.MigrationFiles(), ".")
		require.NoError(t, err)
		drv, err := migratemysql.WithInstance(db, &migratemysql.Config{})
		require.NoError(t, err)
		m, err := migrate.NewWithInstance("iofs", src, "mysql", drv)
		require.NoError(t, err)
		require.NoError(t, m.Force(2))
		require.ErrorIs(t, m.Up(), migrate.ErrNoChange)
		works(t, db)
	})
}
