package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// testConfig is the test server's DSN, parsed, with what the store's users
// must set too: a packet limit taken from the server (an outcome of
// idem.MaxOutcomeLen is 64 MiB) and a dial timeout.
func testConfig(t testing.TB) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	require.NoError(t, err)
	cfg.MaxAllowedPacket = 0 // the server's max_allowed_packet
	cfg.Timeout = 5 * time.Second
	return cfg
}

// newDB connects to the test server with at most maxConns connections.
func newDB(t testing.TB, maxConns int) *sql.DB {
	t.Helper()
	c, err := mysql.NewConnector(testConfig(t))
	require.NoError(t, err)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newTable migrates a table of its own for the test and drops it at the end.
func newTable(t testing.TB, db *sql.DB) string {
	t.Helper()
	table := "idem_test_" + randHex(4)
	require.NoError(t, mysqlstore.New(db, mysqlstore.WithTable(table)).Migrate(context.Background()))
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return table
}

// timeTravel is idemtest's Options.Sleep for a table: d passes on the
// store's clock for every record in it (rows that an open transaction holds
// are skipped: their claim does not lapse while it is open anyway).
func timeTravel(t *testing.T, db *sql.DB, table string) func(time.Duration) {
	return func(d time.Duration) {
		tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.Query("SELECT idem_key FROM " + table + " FOR UPDATE SKIP LOCKED")
		require.NoError(t, err)
		var keys []any
		for rows.Next() {
			var k []byte
			require.NoError(t, rows.Scan(&k))
			keys = append(keys, k)
		}
		require.NoError(t, rows.Close())
		if len(keys) > 0 {
			us := d.Microseconds()
			_, err = tx.Exec(`UPDATE `+table+` SET lease_until = lease_until - ?, expires_at = expires_at - ?,
	created_at = created_at - ? WHERE idem_key IN (?`+strings.Repeat(", ?", len(keys)-1)+`)`,
				append([]any{us, us, us}, keys...)...)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
	}
}

func sweepOf(ctx context.Context, s idem.Store, limit int) (int, error) {
	switch s := s.(type) {
	case *mysqlstore.Store:
		return s.Sweep(ctx, limit)
	case *mysqlstore.TxStore:
		return s.Sweep(ctx, limit)
	}
	panic("not a mysqlstore")
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

// downDB is a database whose server is down.
func downDB(t testing.TB) *sql.DB {
	t.Helper()
	cfg := testConfig(t)
	cfg.Addr = closedAddr(t)
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newLease(db *sql.DB, opts ...mysqlstore.Option) idem.Store { return mysqlstore.New(db, opts...) }
func newTx(db *sql.DB, opts ...mysqlstore.Option) idem.Store    { return mysqlstore.NewTx(db, opts...) }

// unusable returns idemtest's Options.Down and Options.Unmigrated for the
// stores newStore builds: a server that is down, and a table that was never
// migrated on the live one.
func unusable(db *sql.DB, newStore func(*sql.DB, ...mysqlstore.Option) idem.Store) (down, unmigrated func(t *testing.T) idem.Store) {
	down = func(t *testing.T) idem.Store { return newStore(downDB(t)) }
	unmigrated = func(t *testing.T) idem.Store {
		return newStore(db, mysqlstore.WithTable("idem_never_migrated_"+randHex(4)))
	}
	return down, unmigrated
}
