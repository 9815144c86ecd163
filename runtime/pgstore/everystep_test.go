package pgstore_test

import (
	"testing"
	"time"

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
				write, rows := testenv.PGLedger(t, direct, mode == "tx")
				everystep.Run(t, everystep.Store{
					Upstream: testenv.PostgresAddr(t),
					Open: func(t *testing.T, addr string) idem.Store {
						pool := testenv.PGPoolVia(t, addr, 4)
						if mode == "tx" {
							return pgstore.NewTx(pool, opts...)
						}
						return pgstore.New(pool, opts...)
					},
					Write:  write,
					Rows:   rows,
					Layers: mode == "tx",
				})
			})
		}
	}
}
