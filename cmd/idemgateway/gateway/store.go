package gateway

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// openedStore is the store of -store, how to check it is ready, and how
// to close its connections.
type openedStore struct {
	store idem.Store
	ready func(ctx context.Context) error
	close func()
}

// openStore opens the store its DSN names: memstore, pgstore or mysqlstore
// (lease mode: the backend's work is not in the store's database, so there
// is no transaction to join) or redisstore.
func openStore(ctx context.Context, c *config, d deps) (*openedStore, error) {
	switch c.storeKind {
	case "postgres":
		pool, err := pgxpool.New(ctx, c.store)
		if err != nil {
			return nil, fmt.Errorf("-store (%s) %s: %w", envName("store"), redact(c.store), err)
		}
		st, err := construct("pg-table", func() *pgstore.Store { return pgstore.New(pool, pgstore.WithTable(c.pgTable)) })
		if err != nil {
			pool.Close()
			return nil, err
		}
		if c.migrate {
			if err := st.Migrate(ctx); err != nil {
				pool.Close()
				return nil, fmt.Errorf("-migrate: %w", err)
			}
		}
		return &openedStore{store: st, close: pool.Close, ready: func(ctx context.Context) error {
			// The table, not only the server: a gateway whose table is
			// missing would answer every keyed request with 503.
			_, err := pool.Exec(ctx, "SELECT 1 FROM "+st.Table()+" LIMIT 0")
			return err
		}}, nil
	case "mysql":
		cfg, err := storeopen.MySQLConfig(c.store)
		if err != nil {
			return nil, fmt.Errorf("-store (%s) %s: %w", envName("store"), redact(c.store), err)
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("-store (%s) %s: %w", envName("store"), redact(c.store), err)
		}
		db := sql.OpenDB(conn)
		st, err := construct("mysql-table", func() *mysqlstore.Store { return mysqlstore.New(db, mysqlstore.WithTable(c.mysqlTable)) })
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		closeAll := func() { _ = st.Close(); _ = db.Close() }
		if c.migrate {
			if err := st.Migrate(ctx); err != nil {
				closeAll()
				return nil, fmt.Errorf("-migrate: %w", err)
			}
		}
		return &openedStore{store: st, close: closeAll, ready: func(ctx context.Context) error {
			// The table, not only the server (see postgres).
			_, err := db.ExecContext(ctx, "SELECT 1 FROM "+st.Table()+" LIMIT 0")
			return err
		}}, nil
	case "redis":
		opts, err := redis.ParseURL(c.store)
		if err != nil {
			return nil, fmt.Errorf("-store (%s) %s: %w", envName("store"), redact(c.store), err)
		}
		client := redis.NewClient(opts)
		var ropts []redisstore.Option
		if c.redisPrefix != "" {
			ropts = append(ropts, redisstore.WithPrefix(c.redisPrefix))
		}
		st, err := construct("redis-prefix", func() *redisstore.Store { return redisstore.New(client, ropts...) })
		if err != nil {
			_ = client.Close()
			return nil, err
		}
		return &openedStore{store: st, close: func() { _ = client.Close() },
			ready: func(ctx context.Context) error { return client.Ping(ctx).Err() }}, nil
	default:
		var mopts []memstore.Option
		if d.storeClock != nil {
			mopts = append(mopts, memstore.WithClock(d.storeClock))
		}
		return &openedStore{store: memstore.New(mopts...), close: func() {}, ready: func(context.Context) error { return nil }}, nil
	}
}

// construct returns what f builds, or, as an error naming the flag, f's
// panic: a store's constructor panics on an option it refuses (a table
// name, a Redis key prefix).
func construct[S any](flagName string, f func() S) (s S, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("-%s (%s): %v", flagName, envName(flagName), r)
		}
	}()
	return f(), nil
}
