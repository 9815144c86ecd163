package idemctl_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/idemctl"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// mysqlTable connects to the test MariaDB server and migrates a table of
// the test's own, dropped when the test ends.
func mysqlTable(t *testing.T) (*sql.DB, *mysql.Config, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	require.NoError(t, err)
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	table := "idemctl_" + strings.ReplaceAll(t.Name(), "/", "_")
	require.NoError(t, mysqlstore.New(db, mysqlstore.WithTable(table)).Migrate(context.Background()))
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return db, cfg, table
}

// TestMySQL runs every command against a real MariaDB store, given by a
// mysql:// URL and by go-sql-driver/mysql's own DSN after mysql://.
func TestMySQL(t *testing.T) {
	for _, form := range []string{"url", "driver"} {
		t.Run(form, func(t *testing.T) {
			db, cfg, table := mysqlTable(t)
			dsn := "mysql://" + cfg.FormatDSN()
			if form == "url" {
				dsn = "mysql://" + cfg.User + "@" + cfg.Addr + "/" + cfg.DBName
			}
			s := mysqlstore.New(db, mysqlstore.WithTable(table))
			commands(t, s, []string{"--dsn", dsn, "--table", table}, func(k idem.Key) {
				_, err := db.Exec("UPDATE "+s.Table()+" SET lease_until = lease_until - 600000000 WHERE idem_key = ?", k.ID[:])
				require.NoError(t, err)
			})
		})
	}
}

// TestMySQLErrors: a wrong MySQL DSN, an unreachable server, a missing
// table or database each say what is wrong, without the password.
func TestMySQLErrors(t *testing.T) {
	_, cfg, table := mysqlTable(t)
	dsn := "mysql://" + cfg.FormatDSN()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"driver form, unbalanced", []string{"--dsn", "mysql://u:secret@tcp(127.0.0.1:1/db", "stats"}, 2, "not a MySQL DSN"},
		{"no database", []string{"--dsn", "mysql://u:secret@127.0.0.1:3306", "stats"}, 2, "no database"},
		{"no host", []string{"--dsn", "mysql://u:secret@/db", "stats"}, 2, "no host"},
		{"bad parameter", []string{"--dsn", "mysql://u:secret@127.0.0.1:1/db?timeout=soon", "stats"}, 2, "not a MySQL DSN"},
		{"unreachable URL", []string{"--dsn", "mysql://u:secret@127.0.0.1:1/db?timeout=2s", "stats"}, 2, "cannot reach the server"},
		{"unreachable driver form", []string{"--dsn", "mysql://u:secret@tcp(127.0.0.1:1)/db?timeout=2s", "stats"}, 2, "cannot reach the server"},
		{"missing table", []string{"--dsn", dsn, "--table", "idem_never_migrated", "stats"}, 1, "Migrate"},
		{"missing table list", []string{"--dsn", dsn, "--table", "idem_never_migrated", "list"}, 1, "Migrate"},
		{"missing table get", []string{"--dsn", dsn, "--table", "idem_never_migrated", "get", strings.Repeat("ab", 32)}, 1, "Migrate"},
		{"bad table", []string{"--dsn", dsn, "--table", "a-b", "stats"}, 2, "not a plain identifier"},
		{"no such key", []string{"--dsn", dsn, "--table", table, "get", strings.Repeat("ab", 32)}, 1, "no live record under this key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errw := run(t, c.args...)
			assert.Equal(t, c.code, code, errw)
			assert.Contains(t, errw, c.want)
			assert.NotContains(t, errw, "secret", "the password is not printed")
		})
	}
}

// TestMySQLConfig: both forms give the same configuration.
func TestMySQLConfig(t *testing.T) {
	a, err := idemctl.MySQLConfig("mysql://app:p%40ss@db.internal/orders?tls=skip-verify&timeout=3s")
	require.NoError(t, err)
	b, err := idemctl.MySQLConfig("mysql://app:p@ss@tcp(db.internal:3306)/orders?tls=skip-verify&timeout=3s")
	require.NoError(t, err)
	for _, c := range []*mysql.Config{a, b} {
		assert.Equal(t, "app", c.User)
		assert.Equal(t, "p@ss", c.Passwd)
		assert.Equal(t, "db.internal:3306", c.Addr)
		assert.Equal(t, "orders", c.DBName)
		assert.Equal(t, "skip-verify", c.TLSConfig)
		assert.Equal(t, "3s", c.Timeout.String())
	}
}
