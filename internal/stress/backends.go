package stress

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// Memory is the embedded store; each run gets a fresh one.
func Memory() Backend {
	return Backend{Name: "mem", Open: func(context.Context, Servers) (*Handle, error) {
		s := memstore.New()
		return &Handle{Store: s, Sweep: s.Sweep}, nil
	}}
}

// Redis is redisstore on the server at addr (prefix "stress:"), or on the
// scenario's own server. It may lose records (its documented limit).
func Redis(addr string) Backend {
	return Backend{Name: "redis", Open: func(ctx context.Context, srv Servers) (*Handle, error) {
		at := addr
		if srv.RedisAddr != "" {
			at = srv.RedisAddr
		}
		c, err := OpenRedis(ctx, at)
		if err != nil {
			return nil, err
		}
		s := redisstore.New(c, redisstore.WithPrefix("stress:"))
		return &Handle{Store: s, Close: func() { _ = c.Close() }, MayLose: true, Lose: RedisLoser(c, s)}, nil
	}}
}

// RedisLoser returns a Handle.Lose that deletes the record of a key from s
// (a redisstore on c: a client of one server or of a cluster).
func RedisLoser(c redis.UniversalClient, s *redisstore.Store) func(ctx context.Context, k idem.Key) error {
	return func(ctx context.Context, k idem.Key) error { return c.Del(ctx, s.RedisKey(k)).Err() }
}

// OpenRedis returns a client of the Redis server at addr, after a PING.
func OpenRedis(ctx context.Context, addr string) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return c, nil
}
