package stress_test

import (
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestStorm runs every scenario that applies, shortened, on the memory
// store.
func TestStorm(t *testing.T) {
	backends := []stress.Backend{stress.Memory()}
	for _, b := range backends {
		for _, sc := range stress.Scenarios() {
			if sc.Applies != nil && !sc.Applies(b.Name) {
				continue
			}
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
		}
	}
}

// TestStormRedis runs every scenario that applies on Redis ($IDEM_REDIS_ADDR);
// redis-kill runs on a redis-server the test starts (and kills).
func TestStormRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := stress.Redis(testenv.RedisAddr(t))
	for _, sc := range stress.Scenarios() {
		if sc.Applies != nil && !sc.Applies(b.Name) {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
	}
}

// TestStormCluster runs the short storm on redisstore through a
// *redis.ClusterClient of the test Redis Cluster ($IDEM_REDIS_CLUSTER_ADDRS),
// then the cluster faults (a master SIGKILLed and failed over; 1000 slots
// resharded), each on a cluster the test starts.
func TestStormCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := stress.RedisCluster(testenv.RedisClusterAddrs(t))
	for _, sc := range []stress.Scenario{stress.Plain(), stress.ClusterFailover(), stress.ClusterReshard()} {
		t.Run(sc.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
	}
}
