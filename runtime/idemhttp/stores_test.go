package idemhttp_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// onEveryStore runs test, in parallel with the other tests, on every store
// of everystore (memstore, pgstore in lease and transactional mode,
// redisstore, tiered) and on redisstore through a *redis.ClusterClient of
// the test Redis Cluster ($IDEM_REDIS_CLUSTER_ADDRS). A missing server
// skips its subtest, or fails it under CI=true.
func onEveryStore(t *testing.T, test func(t *testing.T, newStore newStoreFunc)) {
	t.Parallel()
	everystore.Run(t, "idemhttp_test_", func(t *testing.T, newStore everystore.NewStore) {
		t.Parallel()
		test(t, newStoreFunc(newStore))
	})
	t.Run("RedisCluster", func(t *testing.T) {
		t.Parallel()
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t), PoolSize: 128})
		t.Cleanup(func() { _ = c.Close() })
		if err := c.ForEachShard(t.Context(), func(ctx context.Context, s *redis.Client) error {
			return s.Ping(ctx).Err()
		}); err != nil {
			t.Fatalf("redis cluster: %v", err)
		}
		test(t, func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix("idemhttp-test:")) })
	})
}
