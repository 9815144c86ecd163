package storeopen_test

import (
	"context"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/storeopen"
)

// TestMySQLConfig: both forms give the same configuration.
func TestMySQLConfig(t *testing.T) {
	a, err := storeopen.MySQLConfig("mysql://app:p%40ss@db.internal/orders?tls=skip-verify&timeout=3s")
	require.NoError(t, err)
	b, err := storeopen.MySQLConfig("mysql://app:p@ss@tcp(db.internal:3306)/orders?tls=skip-verify&timeout=3s")
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

// TestRedact: a DSN's password is hidden in a URL and in
// go-sql-driver/mysql's form; a DSN without one is left as it is.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@db:5432/orders?sslmode=disable": "postgres://app:xxxxx@db:5432/orders?sslmode=disable",
		"mysql://app:s3cret@tcp(db:3306)/orders?tls=true":      "mysql://app:xxxxx@tcp(db:3306)/orders?tls=true",
		"mysql://app:p@ss@tcp(db:3306)/orders":                 "mysql://app:xxxxx@tcp(db:3306)/orders",
		"redis://:s3cret@cache:6379/0":                         "redis://:xxxxx@cache:6379/0",
		"redis://cache:6379/0":                                 "redis://cache:6379/0",
		"sqlite:/var/lib/app/idem.db":                          "sqlite:/var/lib/app/idem.db",
	} {
		assert.Equal(t, want, storeopen.Redact(in), in)
	}
}

// TestOpenErrors: what Open refuses before any opener runs, each a
// sentence without the password.
func TestOpenErrors(t *testing.T) {
	openers := storeopen.Openers{"postgres": storeopen.OpenPostgres}
	for dsn, want := range map[string]string{
		"":                        "pass --dsn or set IDEM_DSN",
		"memory":                  "runtime/idemadmin",
		"localhost":               "want scheme:",
		"oracle://u:s3cret@db/x":  `unknown scheme "oracle" (this build serves postgres:)`,
		"sqlite:/tmp/x.db":        "runtime/sqlitestore/cmd/idemctl",
		"redis://u:s3cret@host:1": `unknown scheme "redis"`,
	} {
		_, _, err := storeopen.Open(context.Background(), dsn, storeopen.Options{}, openers)
		require.Error(t, err, dsn)
		assert.Contains(t, err.Error(), want, dsn)
		assert.NotContains(t, err.Error(), "s3cret", dsn)
	}
}
