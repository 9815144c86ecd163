package pgstress

import (
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestStorm runs every scenario, shortened, on pgstore (lease mode) and on
// tiered; they need $IDEM_PG_DSN (and $IDEM_REDIS_ADDR for tiered).
func TestStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dsn := testenv.PostgresDSN(t)
	backends := []stress.Backend{Postgres(dsn)}
	if addr := testenv.RedisAddr(t); addr != "" {
		backends = append(backends, Tiered(dsn, addr))
	}
	for _, b := range backends {
		for _, sc := range stress.Scenarios() {
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) {
				res, err := stress.Run(t.Context(), sc, b, stress.Options{Short: true, VizDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				t.Log(res.Line())
				for _, f := range res.Failures {
					t.Error(f)
				}
			})
		}
	}
}
