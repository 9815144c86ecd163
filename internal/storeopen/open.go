package storeopen

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// OpenPostgres opens a pgstore (the plain table, or the partitioned one with
// --partitions) on a pool of two connections, after checking that the
// server answers.
func OpenPostgres(ctx context.Context, dsn string, o Options) (idem.AdminStore, func(), error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("not a PostgreSQL DSN: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot reach the server: %w", err)
	}
	var opts []pgstore.Option
	if o.Table != "" {
		opts = append(opts, pgstore.WithTable(o.Table))
	}
	if o.Partitions > 0 {
		opts = append(opts, pgstore.WithPartitions(o.Partitions))
	}
	s, err := build(func() *pgstore.Store { return pgstore.New(pool, opts...) })
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, pool.Close, nil
}

// build returns what f builds, or f's panic (a store's constructor panics
// on an invalid table name) as an error.
func build[S any](f func() S) (s S, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return f(), nil
}

// OpenRedis opens a redisstore on redis://, rediss:// (one server) or
// redis-cluster://host:port?addr=host2:port2 (a Cluster), after checking
// that the server answers.
func OpenRedis(ctx context.Context, dsn string, o Options) (idem.AdminStore, func(), error) {
	var client redis.UniversalClient
	if rest, ok := strings.CutPrefix(dsn, "redis-cluster://"); ok {
		opt, err := redis.ParseClusterURL("redis://" + rest)
		if err != nil {
			return nil, nil, fmt.Errorf("not a Redis Cluster DSN: %w", err)
		}
		client = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("not a Redis DSN: %w", err)
		}
		client = redis.NewClient(opt)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("cannot reach the server: %w", err)
	}
	var opts []redisstore.Option
	if o.Prefix != "" {
		opts = append(opts, redisstore.WithPrefix(o.Prefix))
	}
	return redisstore.New(client, opts...), func() { _ = client.Close() }, nil
}
