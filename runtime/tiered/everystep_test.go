package tiered_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy/everystep"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// TestLostReplyEveryStep loses the reply of each request of a call in
// turn, on the Redis side or on the PostgreSQL side, in both modes, for
// every way the method ends: no panic, one settled answer that is
// replayed, a final error's writes never committed (everystep).
func TestLostReplyEveryStep(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		for _, lossy := range []string{"redis", "postgres"} {
			t.Run(mode+"/"+lossy, func(t *testing.T) {
				prefix := "tiered-everystep-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
				direct := testenv.PGPoolVia(t, testenv.PostgresAddr(t), 4)
				table := "idem_tiered_tx_test"
				require.NoError(t, pgstore.New(direct, pgstore.WithTable(table)).Migrate(t.Context()))
				s := everystep.Store{Upstream: testenv.RedisAddr(t)}
				if lossy == "postgres" {
					s.Upstream = testenv.PostgresAddr(t)
				}
				s.Open = func(t *testing.T, addr string) idem.Store {
					redisAddr, pool := testenv.RedisAddr(t), direct
					if lossy == "redis" {
						redisAddr = addr
					} else {
						pool = testenv.PGPoolVia(t, addr, 4)
					}
					c := redis.NewClient(&redis.Options{Addr: redisAddr})
					t.Cleanup(func() { _ = c.Close() })
					fast := redisstore.New(c, redisstore.WithPrefix(prefix))
					if mode == "tx" {
						return tiered.NewTx(fast, pgstore.NewTx(pool, pgstore.WithTable(table)))
					}
					return tiered.New(fast, pgstore.New(pool, pgstore.WithTable(table)))
				}
				if mode == "lease" {
					var ledger everystep.Ledger
					s.Write, s.Rows = ledger.Write, ledger.Rows
				} else {
					s.Write, s.Rows = testenv.PGLedger(t, direct, true)
				}
				s.Layers = mode == "tx" && lossy == "postgres"
				everystep.Run(t, s)
			})
		}
	}
}
