package gateway

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
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

// openStore opens the store its DSN names: memstore, pgstore (lease mode:
// the backend's work is not in the store's database, so there is no
// transaction to join) or redisstore.
func openStore(ctx context.Context, c *config, d deps) (*openedStore, error) {
	switch c.storeKind {
	case "postgres":
		pool, err := pgxpool.New(ctx, c.store)
		if err != nil {
			return nil, fmt.Errorf("-store (%s) %s: %w", envName("store"), redact(c.store), err)
		}
		st := pgstore.New(pool, pgstore.WithTable(c.pgTable))
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
		return &openedStore{store: redisstore.New(client, ropts...), close: func() { _ = client.Close() },
			ready: func(ctx context.Context) error { return client.Ping(ctx).Err() }}, nil
	default:
		var mopts []memstore.Option
		if d.storeClock != nil {
			mopts = append(mopts, memstore.WithClock(d.storeClock))
		}
		return &openedStore{store: memstore.New(mopts...), close: func() {}, ready: func(context.Context) error { return nil }}, nil
	}
}
