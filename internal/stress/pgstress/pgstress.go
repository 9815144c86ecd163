// Package pgstress adds the PostgreSQL backends of the stress harness:
// pgstore in lease mode, pgstore in transactional mode (with a business
// table written through the call's transaction), and tiered (Redis in front
// of PostgreSQL).
//
// It is a package of its own so that the harness and its memory and Redis
// scenarios build without the pgx pool.
package pgstress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// Postgres is pgstore in lease mode on the server at dsn (its default table,
// migrated on open; every run uses a tenant of its own).
func Postgres(dsn string) stress.Backend {
	return stress.Backend{Name: "pg", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		pool, app, err := openPool(ctx, pick(srv.PGDSN, dsn), 16)
		if err != nil {
			return nil, err
		}
		s := pgstore.New(pool)
		if err := migrate(ctx, s); err != nil {
			pool.Close()
			return nil, err
		}
		terminate, closeKiller := terminator(pool, app)
		return &stress.Handle{Store: s, Sweep: s.Sweep, Terminate: terminate, Close: func() { closeKiller(); pool.Close() }}, nil
	}}
}

// PostgresTx is pgstore in transactional mode (pgstore.NewTx): Pay's body
// writes a row of idem_stress_payments through the call's transaction
// (pgstore.TxFrom), and executions are counted from the committed rows.
func PostgresTx(dsn string) stress.Backend {
	return stress.Backend{Name: "pg-tx", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		// A duplicate waits for the key's transaction on a connection of
		// its own: room for every worker, the sweeper and the probe.
		pool, app, err := openPool(ctx, pick(srv.PGDSN, dsn), 48)
		if err != nil {
			return nil, err
		}
		s := pgstore.NewTx(pool)
		if err := migrate(ctx, s.Store); err != nil {
			pool.Close()
			return nil, err
		}
		if _, err := pool.Exec(ctx, paymentsSchema); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: business table: %w", err)
		}
		b := &payments{pool: pool}
		terminate, closeKiller := terminator(pool, app)
		return &stress.Handle{Store: s, Sweep: s.Sweep, Tx: true, Business: b, Terminate: terminate,
			Close: func() { closeKiller(); b.cleanup(); pool.Close() }}, nil
	}}
}

// Tiered is Redis in front of PostgreSQL.
func Tiered(dsn, addr string) stress.Backend {
	return stress.Backend{Name: "tiered", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		return openTiered(ctx, pick(srv.PGDSN, dsn), func() (*redis.Client, error) {
			return stress.OpenRedis(ctx, pick(srv.RedisAddr, addr))
		})
	}}
}

// TieredSentinel is Redis behind Sentinels (go-redis's failover client, on
// the scenario's own Sentinels: Servers.Sentinel) in front of PostgreSQL at
// dsn (or the scenario's own).
func TieredSentinel(dsn string) stress.Backend {
	return stress.Backend{Name: "tiered-sentinel", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		if srv.Sentinel == nil {
			return nil, fmt.Errorf("tiered-sentinel: the scenario starts no Sentinels")
		}
		return openTiered(ctx, pick(srv.PGDSN, dsn), func() (*redis.Client, error) {
			return stress.OpenSentinel(ctx, srv.Sentinel)
		})
	}}
}

// openTiered opens a tiered store of the Redis client openRedis returns in
// front of PostgreSQL at dsn, for Tiered and TieredSentinel.
func openTiered(ctx context.Context, dsn string, openRedis func() (*redis.Client, error)) (*stress.Handle, error) {
	pool, _, err := openPool(ctx, dsn, 16)
	if err != nil {
		return nil, err
	}
	pg := pgstore.New(pool)
	if err := migrate(ctx, pg); err != nil {
		pool.Close()
		return nil, err
	}
	c, err := openRedis()
	if err != nil {
		pool.Close()
		return nil, err
	}
	fast := redisstore.New(c, redisstore.WithPrefix("stress:"))
	s := tiered.New(fast, pg)
	// A record repaired into Redis may be replayed for up to one more
	// TTL after the durable row expired (tiered's documented limit).
	return &stress.Handle{Store: s, Sweep: pg.Sweep, StaleReplay: true, Lose: stress.RedisLoser(c, fast),
		Close: func() { _ = c.Close(); pool.Close() }}, nil
}

// TieredCluster is a Redis Cluster (through a *redis.ClusterClient) in
// front of PostgreSQL.
func TieredCluster(dsn string, addrs []string) stress.Backend {
	return stress.Backend{Name: "tiered-cluster", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		pool, _, err := openPool(ctx, pick(srv.PGDSN, dsn), 16)
		if err != nil {
			return nil, err
		}
		pg := pgstore.New(pool)
		if err := migrate(ctx, pg); err != nil {
			pool.Close()
			return nil, err
		}
		at := addrs
		if len(srv.RedisClusterAddrs) > 0 {
			at = srv.RedisClusterAddrs
		}
		c, err := stress.OpenRedisCluster(ctx, at)
		if err != nil {
			pool.Close()
			return nil, err
		}
		fast := redisstore.New(c, redisstore.WithPrefix("stress:"))
		s := tiered.New(fast, pg)
		return &stress.Handle{Store: s, Sweep: pg.Sweep, StaleReplay: true, Lose: stress.RedisLoser(c, fast),
			Close: func() { _ = c.Close(); pool.Close() }}, nil
	}}
}

func pick(override, def string) string {
	if override != "" {
		return override
	}
	return def
}

// openPool opens a pool whose sessions carry an application_name of their
// own ("idem-stress-" and a random suffix), so that a fault injector can
// terminate this run's sessions and no one else's.
func openPool(ctx context.Context, dsn string, conns int32) (*pgxpool.Pool, string, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: %w", err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	app := "idem-stress-" + hex.EncodeToString(rnd[:])
	cfg.MaxConns = conns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: %w", err)
	}
	return pool, app, nil
}

func migrate(ctx context.Context, s *pgstore.Store) error {
	if err := s.Migrate(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// terminator returns a Handle.Terminate that ends sessions of this pool
// (application_name = app) that are inside a transaction, from a session
// of its own (another application_name, so it never ends itself), and the
// func that closes that session.
func terminator(pool *pgxpool.Pool, app string) (func(ctx context.Context, n int) (int, error), func()) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = app + "-killer"
	var (
		mu   sync.Mutex
		conn *pgx.Conn
		seen = map[int32]bool{}
	)
	terminate := func(ctx context.Context, n int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if conn == nil || conn.IsClosed() {
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return 0, err
			}
			conn = c
		}
		var pids []int32
		err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)), '{}') FROM (
	SELECT pid FROM pg_stat_activity
	WHERE application_name = $1 AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
		AND NOT pid = ANY($3::int[])
	ORDER BY state = 'idle in transaction' DESC, random() LIMIT $2) s`, app, n, signalled(seen)).Scan(&pids)
		killed := 0
		for _, p := range pids {
			if !seen[p] { // a session already signalled may still be listed while it exits
				seen[p] = true
				killed++
			}
		}
		return killed, err
	}
	closeConn := func() {
		mu.Lock()
		defer mu.Unlock()
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}
	return terminate, closeConn
}

func signalled(seen map[int32]bool) []int32 {
	pids := make([]int32, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	return pids
}

const paymentsSchema = `CREATE TABLE IF NOT EXISTS idem_stress_payments (
	tenant text NOT NULL,
	order_id text NOT NULL,
	payment_id text NOT NULL,
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idem_stress_payments_tenant ON idem_stress_payments (tenant, order_id)`

// payments is the business table of the transactional backend.
type payments struct {
	pool    *pgxpool.Pool
	tenants []string
}

// Debit implements stress.Business: one row, through the call's transaction.
func (p *payments) Debit(ctx context.Context, tenant, order, paymentID string) error {
	tx, ok := pgstore.TxFrom(ctx)
	if !ok {
		return fmt.Errorf("no idempotency transaction in the method's context")
	}
	_, err := tx.Exec(ctx, "INSERT INTO idem_stress_payments (tenant, order_id, payment_id) VALUES ($1, $2, $3)",
		tenant, order, paymentID)
	return err
}

// Committed implements stress.Business.
func (p *payments) Committed(ctx context.Context, tenant string) (map[string]int, error) {
	p.tenants = append(p.tenants, tenant)
	rows, err := p.pool.Query(ctx, "SELECT order_id, count(*) FROM idem_stress_payments WHERE tenant = $1 GROUP BY order_id", tenant)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	var order string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&order, &n}, func() error { m[order] = n; return nil })
	return m, err
}

func (p *payments) cleanup() {
	for _, t := range p.tenants {
		_, _ = p.pool.Exec(context.Background(), "DELETE FROM idem_stress_payments WHERE tenant = $1", t)
	}
}
