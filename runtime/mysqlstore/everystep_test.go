package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy/everystep"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestLostReplyEveryStep loses the reply of each request of a call in
// turn (claim, method statements, outcome, COMMIT, rollback, the question
// that resolves a lost COMMIT, a reconnection), in both modes, for every
// way the method ends: no panic, one settled answer that is replayed, a
// final error's writes never committed (everystep).
func TestLostReplyEveryStep(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			direct := newDB(t, 4)
			table := newTable(t, direct)
			ledger := newLedger(t, direct)
			everystep.Run(t, everystep.Store{
				Upstream: testConfig(t).Addr,
				Open: func(t *testing.T, addr string) idem.Store {
					cfg := testConfig(t)
					cfg.Addr = addr
					cfg.Logger = &mysql.NopLogger{} // lost connections are the point
					c, err := mysql.NewConnector(cfg)
					require.NoError(t, err)
					db := sql.OpenDB(c)
					db.SetMaxOpenConns(4)
					t.Cleanup(func() { _ = db.Close() })
					if mode == "tx" {
						return mysqlstore.NewTx(db, mysqlstore.WithTable(table))
					}
					return mysqlstore.New(db, mysqlstore.WithTable(table))
				},
				Write: func(ctx context.Context, id string) error {
					insert := "INSERT INTO " + ledger + " (order_id, v) VALUES (?, 'charged')"
					if mode == "lease" {
						_, err := direct.ExecContext(ctx, insert, id)
						return err
					}
					tx, ok := mysqlstore.TxFrom(ctx)
					if !ok {
						return errors.New("no transaction in the method's context")
					}
					_, err := tx.ExecContext(ctx, insert, id)
					return err
				},
				Rows:   func(t *testing.T, id string) int { return rows(t, direct, ledger, id) },
				Layers: true,
			})
		})
	}
}
