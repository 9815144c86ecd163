package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// client returns a client of the test Redis server ($IDEM_REDIS_ADDR), closed
// when t ends.
func client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", c.Options().Addr, err)
	}
	return c
}

func TestConformance(t *testing.T) {
	c := client(t)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix("idemtest:")) },
	})
}
