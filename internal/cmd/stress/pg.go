package main

import (
	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/pgstress"
)

func postgres(dsn string) stress.Backend { return pgstress.Postgres(dsn) }

func postgresTx(dsn string) stress.Backend { return pgstress.PostgresTx(dsn) }

func tiered(dsn, addr string) stress.Backend { return pgstress.Tiered(dsn, addr) }

func tieredCluster(dsn string, addrs []string) stress.Backend {
	return pgstress.TieredCluster(dsn, addrs)
}
