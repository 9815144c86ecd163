package pgstress

import (
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestStormTieredCluster runs the cluster faults on tiered with a Redis
// Cluster in front of PostgreSQL: a master SIGKILLed and failed over, and
// 1000 slots resharded, each on a cluster the test starts. Every key must
// execute once (PostgreSQL decides every claim).
func TestStormTieredCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := TieredCluster(testenv.PostgresDSN(t), testenv.RedisClusterAddrs(t))
	for _, sc := range []stress.Scenario{stress.ClusterFailover(), stress.ClusterReshard()} {
		t.Run(sc.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
	}
}
