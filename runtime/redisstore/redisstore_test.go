package redisstore_test

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// client returns a client of the test Redis server ($IDEM_REDIS_ADDR), closed
// when t ends.
func client(t testing.TB) *redis.Client {
	t.Helper()
	return clientWith(t, redis.Options{})
}

// clientWith is client with the options o (Addr and PoolSize are set).
func clientWith(t testing.TB, o redis.Options) *redis.Client {
	t.Helper()
	o.Addr, o.PoolSize = testenv.RedisAddr(t), 128
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", c.Options().Addr, err)
	}
	return c
}

func TestConformance(t *testing.T) {
	// A 64 MiB reply (idem.MaxOutcomeLen) may take longer than go-redis'
	// default read timeout of 3s on a loaded machine under -race.
	c := clientWith(t, redis.Options{ReadTimeout: 30 * time.Second})
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix(casePrefix())) },
		Down:     down,
	})
}

// casePrefix returns a key prefix of its own for one conformance case: the
// cases run in parallel on one server, and List and Stats, which scan by
// prefix and cannot filter by tenant, must not page through every other
// case's records (thousands, from the race cases) while the real-clock
// records of their own expire.
func casePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "idemtest-" + hex.EncodeToString(b[:]) + ":"
}

// down is idemtest's Options.Down: a store whose server is down (an
// address of this machine on which nothing listens).
func down(t *testing.T) idem.Store {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return redisstore.New(c)
}

func TestBoundedBy(t *testing.T) {
	for _, tc := range []struct {
		opt  redis.Options
		d    time.Duration
		want bool
	}{
		{redis.Options{}, time.Second, false}, // 5s default timeouts
		{redis.Options{ContextTimeoutEnabled: true}, time.Millisecond, true},
		{redis.Options{ReadTimeout: 100 * time.Millisecond}, 100 * time.Millisecond, true},
		{redis.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: time.Second}, 100 * time.Millisecond, false},
		{redis.Options{ReadTimeout: -1}, time.Hour, false}, // no timeout
		{redis.Options{ReadTimeout: -2}, time.Hour, false}, // no deadlines at all
	} {
		c := redis.NewClient(&tc.opt)
		got := redisstore.New(c).BoundedBy(tc.d)
		_ = c.Close()
		if got != tc.want {
			t.Errorf("%+v BoundedBy(%v) = %v, want %v", tc.opt, tc.d, got, tc.want)
		}
	}
}
