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
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

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

// BreakTx is idemtest's Options.BreakTx for mysqlstore.NewTx: it kills,
// from another connection of db, the session of the transaction ctx
// carries (mysqlstore.TxFrom), and waits until the server has ended it.
func BreakTx(db *sql.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := mysqlstore.TxFrom(ctx)
		if !ok {
			return errors.New("mysqlenv: no mysqlstore transaction in the method's context")
		}
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		// KILL marks the session; its thread ends it (and frees its
		// locks) on its own. Wait for that, so that the call's next
		// statement meets a closed session.
		for {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("mysqlenv: session %d still there after KILL: %w", id, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}
