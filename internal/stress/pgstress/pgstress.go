// Package pgstress adds the PostgreSQL backends of the stress harness:
// pgstore in lease mode, and tiered (Redis in front of PostgreSQL).
//
// It is a package of its own so that the harness and its memory and Redis
// scenarios build without the pgx pool.
package pgstress

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// Postgres is pgstore in lease mode on the server at dsn (its default table,
// migrated on open; every run uses a tenant of its own).
func Postgres(dsn string) stress.Backend {
	return stress.Backend{Name: "pg", Open: func(ctx context.Context) (*stress.Handle, error) {
		pool, s, err := openPG(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return &stress.Handle{Store: s, Sweep: s.Sweep, Close: pool.Close}, nil
	}}
}

// Tiered is Redis in front of PostgreSQL.
func Tiered(dsn, addr string) stress.Backend {
	return stress.Backend{Name: "tiered", Open: func(ctx context.Context) (*stress.Handle, error) {
		pool, pg, err := openPG(ctx, dsn)
		if err != nil {
			return nil, err
		}
		c, err := stress.OpenRedis(ctx, addr)
		if err != nil {
			pool.Close()
			return nil, err
		}
		s := tiered.New(redisstore.New(c, redisstore.WithPrefix("stress:")), pg)
		// A record repaired into Redis may be replayed for up to one more
		// TTL after the durable row expired (tiered's documented limit).
		return &stress.Handle{Store: s, Sweep: pg.Sweep, StaleReplay: true, Close: func() { _ = c.Close(); pool.Close() }}, nil
	}}
}

func openPG(ctx context.Context, dsn string) (*pgxpool.Pool, *pgstore.Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["application_name"] = "idem-stress"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	s := pgstore.New(pool)
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	return pool, s, nil
}
