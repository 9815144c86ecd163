package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy/everystep"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestLostReplyEveryStep loses the reply of each request of a call in
// turn (the claim's batch, the method's statements, the outcome's batch,
// a parked COMMIT, the question that resolves a lost COMMIT, a
// reconnection), in both modes, on a plain and a partitioned table, for
// every way the method ends: no panic, one settled answer that is
// replayed, a final error's writes never committed (everystep).
func TestLostReplyEveryStep(t *testing.T) {
	for _, layout := range []string{"plain", "partitioned"} {
		for _, mode := range []string{"lease", "tx"} {
			t.Run(layout+"/"+mode, func(t *testing.T) {
				direct := newPool(t, 4, nil)
				var opts []pgstore.Option
				if layout == "plain" {
					opts = append(opts, pgstore.WithTable(newTable(t, direct)))
				} else {
					table := newPartTable(t, direct, wideInterval, time.Hour)
					opts = append(opts, pgstore.WithTable(table), pgstore.WithPartitions(wideInterval))
				}
				ledger := pgx.Identifier{"everystep_" + randHex(6)}.Sanitize()
				_, err := direct.Exec(t.Context(), "CREATE TABLE "+ledger+" (id text NOT NULL)")
				require.NoError(t, err)
				t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+ledger) })
				everystep.Run(t, everystep.Store{
					Upstream: testenv.PostgresAddr(t),
					Open: func(t *testing.T, addr string) idem.Store {
						pool := testenv.PGPoolVia(t, addr, 4)
						if mode == "tx" {
							return pgstore.NewTx(pool, opts...)
						}
						return pgstore.New(pool, opts...)
					},
					Write: func(ctx context.Context, id string) error {
						insert := "INSERT INTO " + ledger + " (id) VALUES ($1)"
						if mode == "lease" {
							_, err := direct.Exec(ctx, insert, id)
							return err
						}
						tx, ok := pgstore.TxFrom(ctx)
						if !ok {
							return errors.New("no transaction in the method's context")
						}
						_, err := tx.Exec(ctx, insert, id)
						return err
					},
					Rows: func(t *testing.T, id string) int {
						var n int
						require.NoError(t, direct.QueryRow(t.Context(), "SELECT count(*) FROM "+ledger+" WHERE id = $1", id).Scan(&n))
						return n
					},
				})
			})
		}
	}
}
