package pgstress

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
)

// TestFailover runs the PostgreSQL failover scenarios (a primary killed
// mid-storm, its streaming standby promoted; stress.FailoverScenarios) on
// pgstore in lease and transactional mode, each on a primary and standby the
// scenario starts (scripts/pg-replica.sh). They run in `make failover`
// (IDEM_FAILOVER=1), not in `make test`.
func TestFailover(t *testing.T) {
	if os.Getenv("IDEM_FAILOVER") != "1" {
		t.Skip("the failover scenarios run in make failover (IDEM_FAILOVER=1)")
	}
	for _, sc := range stress.FailoverScenarios() {
		for _, b := range []stress.Backend{Postgres(""), PostgresTx("")} {
			if sc.Applies != nil && !sc.Applies(b.Name) {
				continue
			}
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
		}
	}
}
