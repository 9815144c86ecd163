package idemgrpc_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

func TestMemstoreBufconn(t *testing.T) {
	runSuite(t, bufconnT, func(*testing.T) idem.Store { return memstore.New() })
}

func TestMemstoreTCP(t *testing.T) {
	runSuite(t, tcpT, func(*testing.T) idem.Store { return memstore.New() })
}

// pgTable is a pgstore table of the test's own on the test server
// (testenv.PGStoreTable).
func pgTable(t *testing.T) (*pgxpool.Pool, string) { return testenv.PGStoreTable(t, "idemgrpc_test_") }

// TestPostgres runs the suite on pgstore in lease mode, over loopback TCP.
func TestPostgres(t *testing.T) {
	pool, table := pgTable(t)
	runSuite(t, tcpT, func(*testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) })
}

// TestPostgresTx runs the suite on pgstore in transactional mode.
func TestPostgresTx(t *testing.T) {
	pool, table := pgTable(t)
	runSuite(t, bufconnT, func(*testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) })
}

// TestRedis runs the suite on redisstore ($IDEM_REDIS_ADDR).
func TestRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", c.Options().Addr, err)
	}
	runSuite(t, tcpT, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix("idemgrpc-test:")) })
}

// mysqlTable is a mysqlstore table of the test's own on the test MariaDB
// server ($IDEM_MYSQL_DSN, mysqlenv.StoreTable), its pool capped as
// everystore caps it.
func mysqlTable(t *testing.T) (*sql.DB, string) {
	db, _, table := mysqlenv.StoreTable(t, "idemgrpc_test_")
	db.SetMaxOpenConns(64)
	return db, table
}

// TestMySQL runs the suite on mysqlstore in lease mode, over loopback TCP.
func TestMySQL(t *testing.T) {
	db, table := mysqlTable(t)
	runSuite(t, tcpT, func(*testing.T) idem.Store { return mysqlstore.New(db, mysqlstore.WithTable(table)) })
}

// TestMySQLTx runs the suite on mysqlstore in transactional mode.
func TestMySQLTx(t *testing.T) {
	db, table := mysqlTable(t)
	runSuite(t, bufconnT, func(*testing.T) idem.Store { return mysqlstore.NewTx(db, mysqlstore.WithTable(table)) })
}
