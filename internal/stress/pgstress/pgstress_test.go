package pgstress

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/internal/testenv"
)

// TestStorm runs every scenario that applies, shortened, on pgstore in lease
// mode and in transactional mode, and on tiered; they need $IDEM_PG_DSN
// (and $IDEM_REDIS_ADDR for tiered). The scenarios that restart PostgreSQL
// or kill Redis run on servers the test starts once (and stops).
func TestStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dsn := testenv.PostgresDSN(t)
	backends := []stress.Backend{Postgres(dsn), PostgresTx(dsn)}
	if addr := testenv.RedisAddr(t); addr != "" {
		backends = append(backends, Tiered(dsn, addr))
	}
	own := ownServers(t)
	for _, b := range backends {
		for _, sc := range stress.Scenarios() {
			if sc.Applies != nil && !sc.Applies(b.Name) {
				continue
			}
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) {
				var opt stress.Options
				if sc.OwnPG {
					opt.PG = own.pg(t)
				}
				if sc.OwnRedis {
					opt.Redis = own.redis(t)
				}
				stresstest.RunScenario(t, sc, b, opt)
			})
		}
	}
}

// servers starts the test's own servers on first use, once.
type servers struct {
	parent        *testing.T
	pgOnce, rOnce sync.Once
	pgSrv         *stress.PGServer
	rSrv          *stress.RedisServer
	pgErr, rErr   error
}

func ownServers(t *testing.T) *servers { return &servers{parent: t} }

func (s *servers) pg(t *testing.T) *stress.PGServer {
	s.pgOnce.Do(func() {
		s.pgSrv, s.pgErr = stress.StartPG(s.parent.Context())
		if s.pgErr == nil {
			s.parent.Cleanup(s.pgSrv.Stop)
		}
	})
	need(t, s.pgErr)
	return s.pgSrv
}

func (s *servers) redis(t *testing.T) *stress.RedisServer {
	s.rOnce.Do(func() {
		s.rSrv, s.rErr = stress.StartRedis(s.parent.Context())
		if s.rErr == nil {
			s.parent.Cleanup(s.rSrv.Stop)
		}
	})
	need(t, s.rErr)
	return s.rSrv
}

func need(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, stress.ErrMissingServer) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	t.Fatal(err)
}
