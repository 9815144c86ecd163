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
// tiered's PostgreSQL in sentinel-failover is $IDEM_PG_DSN. They all run
// in `make failover` (IDEM_FAILOVER=1); without it (make test) only the
// shortest runs, pg-failover-sync on pgstore's lease mode (10 to 20 s): a
// synchronous standby promoted mid-storm runs no method twice.
func TestFailover(t *testing.T) {
	all := os.Getenv("IDEM_FAILOVER") == "1"
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
			if sc.Applies != nil && !sc.Applies(b.name) || !all && (sc.Name != "pg-failover-sync" || b.name != "pg") {
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
