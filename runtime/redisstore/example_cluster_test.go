package redisstore_test

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// On a Redis Cluster, pass a *redis.ClusterClient: every record is one
// hash-tagged key, so each script runs on the master of the record's slot,
// and go-redis follows MOVED and ASK while slots move. Reload the slot map
// often: go-redis' default (every 60s) leaves the slots of a master that
// died sent to its dead address for up to a minute after its replica took
// over, since a refused connection, unlike MOVED, does not make it reload.
// A failover still loses the records the replica had not received (the
// store's documented limit; put tiered in front of PostgreSQL where that
// matters).
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ClusterStateReloadInterval: time.Second,
	})
	defer client.Close()
	ex := idem.NewExecutor(redisstore.New(client, redisstore.WithPrefix("billing:")), idem.SingleTenant())
	_ = ex
}
