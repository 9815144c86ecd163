package idemhttp_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestRedis runs the suite on redisstore against the test server
// ($IDEM_REDIS_ADDR; skipped when unset, failed under CI=true).
func TestRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", c.Options().Addr, err)
	}
	runSuite(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix("idemhttp-test:")) })
}
