package idemhttp_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestRedisCluster runs the suite on redisstore through a
// *redis.ClusterClient of the test Redis Cluster
// ($IDEM_REDIS_CLUSTER_ADDRS; skipped when unset, failed under CI=true).
func TestRedisCluster(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.ForEachShard(t.Context(), func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	runSuite(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix("idemhttp-test:")) })
}
