// Package testenv finds the throwaway PostgreSQL, Redis, Redis Cluster and
// MariaDB servers that scripts/with-services.sh starts for the tests.
//
// A test that needs a server it cannot find fails when CI=true and skips
// otherwise, with a message that says how to run it.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// PostgresDSN returns the DSN of the test PostgreSQL server ($IDEM_PG_DSN).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return lookup(t, "IDEM_PG_DSN", "PostgreSQL")
}

// RedisAddr returns host:port of the test Redis server ($IDEM_REDIS_ADDR).
func RedisAddr(t testing.TB) string {
	t.Helper()
	return lookup(t, "IDEM_REDIS_ADDR", "Redis")
}

// RedisClusterAddrs returns host:port of every node of the test Redis
// Cluster ($IDEM_REDIS_CLUSTER_ADDRS, comma-separated; 3 masters with 1
// replica each, started by scripts/redis-cluster.sh).
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	return strings.Split(lookup(t, "IDEM_REDIS_CLUSTER_ADDRS", "Redis Cluster"), ",")
}

// MySQLDSN returns the go-sql-driver/mysql DSN of the test MariaDB server
// ($IDEM_MYSQL_DSN, started by scripts/mariadb.sh).
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return lookup(t, "IDEM_MYSQL_DSN", "MariaDB")
}

func lookup(t testing.TB, name, what string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	msg := what + " is not available: $" + name + " is unset; run the tests with `make test` " +
		"(scripts/with-services.sh starts throwaway servers)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
