package pgstress

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestFailover runs the failover scenarios (stress.FailoverScenarios: a
// primary killed mid-storm, a replica promoted) on the stores they apply
// to: pgstore in lease and transactional mode on a PostgreSQL primary and
// standby (scripts/pg-replica.sh), redisstore and tiered on Redis behind
// Sentinels (scripts/redis-sentinel.sh), each started by the scenario.
// tiered's PostgreSQL in sentinel-failover is $IDEM_PG_DSN. They run in
// `make failover` (IDEM_FAILOVER=1), not in `make test`.
func TestFailover(t *testing.T) {
	if os.Getenv("IDEM_FAILOVER") != "1" {
		t.Skip("the failover scenarios run in make failover (IDEM_FAILOVER=1)")
	}
	backends := []struct {
		name string
		open func(t *testing.T, sc stress.Scenario) stress.Backend
	}{
		{"pg", func(*testing.T, stress.Scenario) stress.Backend { return Postgres("") }},
		{"pg-tx", func(*testing.T, stress.Scenario) stress.Backend { return PostgresTx("") }},
		{"redis-sentinel", func(*testing.T, stress.Scenario) stress.Backend { return stress.RedisSentinelBackend() }},
		{"tiered-sentinel", func(t *testing.T, sc stress.Scenario) stress.Backend { return TieredSentinel(pgDSN(t, sc)) }},
	}
	for _, sc := range stress.FailoverScenarios() {
		for _, b := range backends {
			if sc.Applies != nil && !sc.Applies(b.name) {
				continue
			}
			t.Run(sc.Name+"/"+b.name, func(t *testing.T) { stresstest.RunScenario(t, sc, b.open(t, sc), stress.Options{}) })
		}
	}
}

// pgDSN is the PostgreSQL server of tiered-sentinel in a scenario that
// starts none of its own (sentinel-failover): $IDEM_PG_DSN, or the test
// skips (fails under CI=true).
func pgDSN(t *testing.T, sc stress.Scenario) string {
	if sc.Name != "sentinel-failover" {
		return ""
	}
	return testenv.PostgresDSN(t)
}
