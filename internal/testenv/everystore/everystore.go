// Package everystore runs a test on every store of the runtime's module,
// over the settings a user can choose: memstore; pgstore in lease and in
// transactional mode, on a plain table and on a partitioned one
// (WithPartitions); mysqlstore in lease and in transactional mode;
// redisstore on one server and on a Redis Cluster; and tiered (redisstore
// in front of pgstore) in lease and in transactional mode. The servers are
// found by testenv (a missing server skips its subtest, or fails it under
// CI=true). sqlitestore, a module of its own, runs the suites that need it
// itself (runtime/sqlitestore's door tests).
//
// It is for the suites of the integrations (idemhttp and its framework
// adapters), which must pass on each store through the same code.
package everystore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// NewStore returns a store for one subtest; the stores it returns may share
// a server and a table, so a suite uses fresh keys everywhere.
type NewStore func(t *testing.T) idem.Store

// Run runs suite as one subtest per store: Memstore, Postgres (lease
// mode), PostgresTx (transactional), PostgresPartitioned,
// PostgresTxPartitioned, MySQL (lease mode), MySQLTx (transactional),
// Redis, RedisCluster, Tiered, TieredTx. prefix names the test's tables and
// keys ("idemgin_test_").
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
	t.Run("PostgresPartitioned", func(t *testing.T) {
		pool, table := pgPartitionedTable(t, prefix)
		suite(t, func(*testing.T) idem.Store {
			return pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(partitionInterval))
		})
	})
	t.Run("PostgresTxPartitioned", func(t *testing.T) {
		pool, table := pgPartitionedTable(t, prefix)
		suite(t, func(*testing.T) idem.Store {
			return pgstore.NewTx(pool, pgstore.WithTable(table), pgstore.WithPartitions(partitionInterval))
		})
	})
	t.Run("MySQL", func(t *testing.T) {
		db, table := mysqlTable(t, prefix)
		suite(t, func(*testing.T) idem.Store { return mysqlstore.New(db, mysqlstore.WithTable(table)) })
	})
	t.Run("MySQLTx", func(t *testing.T) {
		db, table := mysqlTable(t, prefix)
		suite(t, func(*testing.T) idem.Store { return mysqlstore.NewTx(db, mysqlstore.WithTable(table)) })
	})
	t.Run("Redis", func(t *testing.T) {
		c := redisClient(t)
		suite(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix(prefix+":")) })
	})
	t.Run("RedisCluster", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t), PoolSize: 128})
		t.Cleanup(func() { _ = c.Close() })
		if err := c.ForEachShard(t.Context(), func(ctx context.Context, s *redis.Client) error {
			return s.Ping(ctx).Err()
		}); err != nil {
			t.Fatalf("redis cluster: %v", err)
		}
		suite(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix(prefix+"-cluster:")) })
	})
	t.Run("Tiered", func(t *testing.T) {
		c := redisClient(t)
		pool, table := testenv.PGStoreTable(t, prefix)
		suite(t, func(*testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix(prefix+"-tiered:")), pgstore.New(pool, pgstore.WithTable(table)))
		})
	})
	t.Run("TieredTx", func(t *testing.T) {
		c := redisClient(t)
		pool, table := testenv.PGStoreTable(t, prefix)
		suite(t, func(*testing.T) idem.Store {
			return tiered.NewTx(redisstore.New(c, redisstore.WithPrefix(prefix+"-tieredtx:")), pgstore.NewTx(pool, pgstore.WithTable(table)))
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

// mysqlTable migrates a mysqlstore table of the test's own on the test
// MariaDB server (mysqlenv.StoreTable) and caps its pool at 64 connections,
// as PGStoreTable caps PostgreSQL's at 80: the server allows 300, shared by
// the packages testing at once.
func mysqlTable(t *testing.T, prefix string) (*sql.DB, string) {
	t.Helper()
	db, _, table := mysqlenv.StoreTable(t, prefix)
	db.SetMaxOpenConns(64)
	return db, table
}

// partitionInterval is the partitioned subtests' interval: a quarter of the
// suites' longest TTL (a day), as pgstore's documentation advises.
const partitionInterval = 6 * time.Hour

// pgPartitionedTable migrates a partitioned pgstore table (WithPartitions)
// of the test's own on the test PostgreSQL server, next to the plain one
// testenv.PGStoreTable makes; both are dropped when the test ends.
func pgPartitionedTable(t *testing.T, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	pool, plain := testenv.PGStoreTable(t, prefix)
	table := plain + "_p"
	if err := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(partitionInterval)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return pool, table
}
