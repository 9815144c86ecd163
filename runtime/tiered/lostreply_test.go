package tiered_test

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// lossyTiers is the tiered store on Redis and PostgreSQL, each reached
// through a proxy that drops the replies it is told to.
type lossyTiers struct {
	store        *tiered.Store
	fast         *redisstore.Store
	redis, pg    *lossyproxy.Proxy
	fastFailures atomic.Int64
}

func newLossyTiers(t *testing.T) *lossyTiers {
	t.Helper()
	lt := &lossyTiers{redis: lossyproxy.New(t, testenv.RedisAddr(t))}
	c := redis.NewClient(&redis.Options{Addr: lt.redis.Addr(), MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	lt.fast = redisstore.New(c, redisstore.WithPrefix("tiered-lossy:"))

	lt.pg = lossyproxy.New(t, testenv.PostgresAddr(t))
	pool := testenv.PGPoolVia(t, lt.pg.Addr(), 4)
	durable := pgstore.New(pool, pgstore.WithTable("idem_tiered_test"))
	require.NoError(t, durable.Migrate(t.Context()))

	// A fast timeout long enough for go-redis' retry: the Redis side must
	// answer the retried command itself, not be skipped.
	lt.store = tiered.New(lt.fast, durable, tiered.WithFastTimeout(10*time.Second),
		tiered.WithObserver(func(ev tiered.Event) {
			if ev.Kind == tiered.EventFastError {
				t.Logf("fast error: %v", ev.Err)
				lt.fastFailures.Add(1)
			}
		}))

	// Load every Redis script and prepare every statement, so that a
	// dropped reply is the reply of an applied command.
	ctx := t.Context()
	warm, err := idem.NewKey("warm-up", "Op", strconv.FormatInt(time.Now().UnixNano(), 36))
	require.NoError(t, err)
	for range 2 {
		req := idem.ClaimRequest{Key: warm, Token: 1, Lease: time.Second, TTL: time.Minute}
		_, err = lt.store.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, lt.store.Renew(ctx, warm, 1, time.Second))
		require.NoError(t, lt.store.Release(ctx, warm, 1))
		_, err = lt.store.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, lt.store.Complete(ctx, warm, 1, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute))
		require.NoError(t, lt.fast.Seed(ctx, warm, idem.Record{Status: idem.StatusSucceeded, Fingerprint: idem.Fingerprint{}, Token: 1, Outcome: idem.Outcome{Status: idem.StatusSucceeded}}, time.Minute))
		warm.ID[0]++
	}
	return lt
}

// dropRedis arms the Redis proxy to drop the reply of the next command on
// k's record; dropPG the PostgreSQL proxy, for the next statement whose
// parameters hold k's ID.
func (lt *lossyTiers) dropRedis(k idem.Key) {
	rk := []byte(lt.fast.RedisKey(k))
	lt.redis.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, rk) })
}

func (lt *lossyTiers) dropPG(k idem.Key) {
	id := k.ID
	lt.pg.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, id[:]) })
}

// TestLostRedisReplies: the fast tier applies each command, its reply is
// lost, go-redis sends it again and the repeated command answers success:
// no fast error, and the calls succeed.
func TestLostRedisReplies(t *testing.T) {
	lt := newLossyTiers(t)
	ctx := t.Context()
	tenant := uniqueTenant(t)
	k, err := idem.NewKey(tenant, "Op", "a")
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Token: 21, Lease: time.Minute, TTL: time.Hour, Scheme: 3}

	lt.dropRedis(k)
	c, err := lt.store.Claim(ctx, req)
	require.NoError(t, err)
	assert.True(t, c.Claimed)
	lt.dropRedis(k)
	require.NoError(t, lt.store.Renew(ctx, k, req.Token, 2*time.Minute))
	lt.dropRedis(k)
	require.NoError(t, lt.store.Complete(ctx, k, req.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("r")}, time.Hour))
	assert.Equal(t, 3, lt.redis.Dropped())
	assert.Zero(t, lt.fastFailures.Load(), "the retried Redis commands answered success")

	other := req
	other.Token = 22
	c, err = lt.fast.Claim(ctx, other)
	require.NoError(t, err)
	require.False(t, c.Claimed)
	assert.Equal(t, []byte("r"), c.Record.Outcome.Body, "the fast tier holds the outcome: no repair needed")
	assert.Equal(t, uint32(3), c.Record.Scheme)
}

// TestLostRepliesThroughExecutor: the replies of the claim (Redis) and of
// the outcome (Redis, then PostgreSQL: pgx does not retry, the executor
// does) are lost; the caller gets its success, the method runs once, and
// retries are replayed.
func TestLostRepliesThroughExecutor(t *testing.T) {
	lt := newLossyTiers(t)
	ctx := t.Context()
	tenant := uniqueTenant(t)
	ex := idem.NewExecutor(lt.store, idem.WithTenant(func(context.Context) string { return tenant }), idem.WithLease(time.Minute))
	m := idem.Method{Op: "Orders.Pay", TTL: time.Hour}
	var runs atomic.Int32
	for i, drop := range []func(idem.Key){lt.dropRedis, lt.dropPG} {
		id := "order-" + strconv.Itoa(i)
		k, err := idem.NewKey(tenant, m.Op, id)
		require.NoError(t, err)
		lt.dropRedis(k) // the fast claim's reply
		v, err := call(ctx, ex, &m, id, "100", func(context.Context) (string, error) {
			runs.Add(1)
			drop(k) // the outcome's reply, on one tier
			return "receipt-" + id, nil
		})
		require.NoError(t, err, "%s: a call whose replies were lost succeeded: the caller is told so", id)
		assert.Equal(t, "receipt-"+id, v)
		assert.Zero(t, lt.redis.Pending()+lt.pg.Pending(), "%s: every armed drop happened", id)

		v, err = call(ctx, ex, &m, id, "100", func(context.Context) (string, error) { runs.Add(1); return "again", nil })
		require.NoError(t, err)
		assert.Equal(t, "receipt-"+id, v, "%s: replayed", id)
	}
	assert.Equal(t, int32(2), runs.Load(), "each method ran once")
	assert.Equal(t, 3, lt.redis.Dropped())
	assert.Equal(t, 1, lt.pg.Dropped())
}
