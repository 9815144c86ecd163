// Package everystore runs a test on every store of the runtime: memstore,
// pgstore in lease and in transactional mode, redisstore, and tiered
// (redisstore in front of pgstore), the servers found by testenv (a
// missing server skips its subtest, or fails it under CI=true).
//
// It is for the suites of the integrations (idemhttp and its framework
// adapters), which must pass on each store through the same code.
package everystore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// NewStore returns a store for one subtest; the stores it returns may share
// a server and a table, so a suite uses fresh keys everywhere.
type NewStore func(t *testing.T) idem.Store

// Run runs suite as one subtest per store: Memstore, Postgres (lease
// mode), PostgresTx (transactional), Redis, Tiered. prefix names the
// test's tables and keys ("idemgin_test_").
func Run(t *testing.T, prefix string, suite func(t *testing.T, newStore NewStore)) {
	t.Run("Memstore", func(t *testing.T) {
		suite(t, func(*testing.T) idem.Store { return memstore.New() })
	})
	t.Run("Postgres", func(t *testing.T) {
		pool, table := testenv.PGStoreTable(t, prefix)
		suite(t, func(*testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) })
	})
	t.Run("PostgresTx", func(t *testing.T) {
		pool, table := testenv.PGStoreTable(t, prefix)
		suite(t, func(*testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) })
	})
	t.Run("Redis", func(t *testing.T) {
		c := redisClient(t)
		suite(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix(prefix+":")) })
	})
	t.Run("Tiered", func(t *testing.T) {
		c := redisClient(t)
		pool, table := testenv.PGStoreTable(t, prefix)
		suite(t, func(*testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix(prefix+"-tiered:")), pgstore.New(pool, pgstore.WithTable(table)))
		})
	})
}

// redisClient connects to the test Redis server and checks that it answers.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", c.Options().Addr, err)
	}
	return c
}
