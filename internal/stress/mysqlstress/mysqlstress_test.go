package mysqlstress

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestStorm runs every scenario that applies, shortened, on mysqlstore in
// lease mode and in transactional mode ($IDEM_MYSQL_DSN). The scenario that
// kills MariaDB runs on a server the test starts once (and stops).
func TestStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dsn := testenv.MySQLDSN(t)
	parent := t
	var (
		once   sync.Once
		own    *stress.MySQLServer
		ownErr error
	)
	for _, b := range []stress.Backend{MySQL(dsn), MySQLTx(dsn)} {
		for _, sc := range stress.Scenarios() {
			if sc.Applies != nil && !sc.Applies(b.Name) {
				continue
			}
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) {
				var opt stress.Options
				if sc.OwnMySQL {
					once.Do(func() {
						own, ownErr = stress.StartMySQL(t.Context())
						if ownErr == nil {
							parent.Cleanup(own.Stop)
						}
					})
					if ownErr != nil {
						if errors.Is(ownErr, stress.ErrMissingServer) && os.Getenv("CI") != "true" {
							t.Skip(ownErr)
						}
						t.Fatal(ownErr)
					}
					opt.MySQL = own
				}
				stresstest.RunScenario(t, sc, b, opt)
			})
		}
	}
}
