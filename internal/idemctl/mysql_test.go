package idemctl_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestMySQL runs every command against a real MariaDB store, given by a
// mysql:// URL and by go-sql-driver/mysql's own DSN after mysql://.
func TestMySQL(t *testing.T) {
	for _, form := range []string{"url", "driver"} {
		t.Run(form, func(t *testing.T) {
			db, cfg, table := mysqlenv.StoreTable(t, "idemctl_")
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
	_, cfg, table := mysqlenv.StoreTable(t, "idemctl_")
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
