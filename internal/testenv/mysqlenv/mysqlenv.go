// Package mysqlenv connects the tests to the throwaway MariaDB server that
// scripts/with-services.sh starts (testenv.MySQLDSN). It is a package of
// its own so that the nested modules that import testenv need no MySQL
// driver.
package mysqlenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// StoreTable connects to the test MariaDB server and migrates a mysqlstore
// table of the test's own, named prefix and a random suffix; it returns the
// database, the parsed DSN and the table's name. The table is dropped and
// the database closed when the test ends.
func StoreTable(t testing.TB, prefix string) (*sql.DB, *mysql.Config, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := prefix + hex.EncodeToString(b)
	if err := mysqlstore.New(db, mysqlstore.WithTable(table)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP TABLE IF EXISTS `" + table + "`"); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return db, cfg, table
}
