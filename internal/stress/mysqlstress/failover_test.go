//go:build failover

package mysqlstress

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestFailoverGalera runs galera-kill (a node of a three-node MariaDB
// Galera cluster killed mid-storm, connections spread over every node) on
// mysqlstore's lease mode, on a cluster the scenario starts
// (scripts/galera.sh), and checks that transactional mode refuses the
// cluster with mysqlstore.ErrGalera. It builds with the tag failover, which
// `make failover` passes: a three-node cluster is too long for `make test`.
func TestFailoverGalera(t *testing.T) {
	sc := stress.GaleraKill()
	t.Run(sc.Name+"/mysql", func(t *testing.T) { stresstest.RunScenario(t, sc, MySQL(""), stress.Options{}) })
	t.Run("tx-refused", func(t *testing.T) {
		g, err := stress.StartGalera(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Stop()
		h, err := MySQLTx("").Open(t.Context(), stress.Servers{MySQLDSN: g.DSN})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		ex := idem.NewExecutor(h.Store, idem.SingleTenant())
		m := &idem.Method{Op: "galera", TTL: time.Hour}
		ran := 0
		for range 3 { // the answer is remembered: the same on every call
			var k idem.KeyParts
			k.String("k", "1")
			var hs idem.Hasher
			hs.Int(1)
			_, err = idem.Do(t.Context(), ex, m, &k, &hs, func(context.Context) (int, error) {
				ran++
				return 1, nil
			})
			if !errors.Is(err, mysqlstore.ErrGalera) {
				t.Fatalf("a transactional claim on Galera: got %v, want mysqlstore.ErrGalera", err)
			}
		}
		if ran != 0 {
			t.Fatalf("the method ran %d times on a refused store", ran)
		}
	})
}
