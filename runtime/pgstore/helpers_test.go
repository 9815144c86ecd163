package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// rtCounter counts network round trips: a read that follows a write is one.
type rtCounter struct {
	n atomic.Int64
}

type countingConn struct {
	net.Conn
	c       *rtCounter
	mu      sync.Mutex
	written bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.written = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if c.written {
		c.written = false
		c.c.n.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

// newPool connects to the test server; with rt, it counts round trips.
func newPool(t testing.TB, maxConns int32, rt *rtCounter) *pgxpool.Pool {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	if rt != nil {
		countRoundTrips(cfg, rt)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// countRoundTrips makes cfg's connections count their round trips in rt.
func countRoundTrips(cfg *pgxpool.Config, rt *rtCounter) {
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, c: rt}, nil
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newTable migrates a table of its own for the test and drops it at the end.
func newTable(t testing.TB, pool *pgxpool.Pool, opts ...pgstore.Option) string {
	t.Helper()
	name := "idem_test_" + randHex(6)
	s := pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable(name)}, opts...)...)
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

func key(t testing.TB, tenant, id string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, "test.Op", id)
	require.NoError(t, err)
	return k
}

func fp(s string) idem.Fingerprint {
	var f idem.Fingerprint
	copy(f[:], s)
	return f
}

var tokens atomic.Uint64

func newToken() idem.Token { return idem.Token(tokens.Add(1)<<16 | 0xbeef) }

func claimReq(k idem.Key, f string, lease, ttl time.Duration) idem.ClaimRequest {
	return idem.ClaimRequest{Key: k, Fingerprint: fp(f), Token: newToken(), Lease: lease, TTL: ttl}
}

func succeeded(body string) idem.Outcome {
	return idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body)}
}
