package stress

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// Memory is the embedded store; each run gets a fresh one.
func Memory() Backend {
	return Backend{Name: "mem", Open: func(context.Context) (*Handle, error) {
		s := memstore.New()
		return &Handle{Store: s, Sweep: s.Sweep}, nil
	}}
}

// Redis is redisstore on the server at addr (prefix "stress:").
func Redis(addr string) Backend {
	return Backend{Name: "redis", Open: func(ctx context.Context) (*Handle, error) {
		c, err := OpenRedis(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &Handle{Store: redisstore.New(c, redisstore.WithPrefix("stress:")), Close: func() { _ = c.Close() }}, nil
	}}
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
