package redisstore_test

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
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// lossy returns a store whose client talks to the test Redis server
// through a proxy that drops the replies it is told to, with go-redis'
// retries set to maxRetries (-1: none).
func lossy(t *testing.T, maxRetries int) (*redisstore.Store, *lossyproxy.Proxy) {
	t.Helper()
	p := lossyproxy.New(t, testenv.RedisAddr(t))
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: maxRetries})
	t.Cleanup(func() { _ = c.Close() })
	s := redisstore.New(c, redisstore.WithPrefix("idemtest-lossy:"))
	// Load every script, so that a dropped reply is the reply of an applied
	// script, not of an EVALSHA the server refused.
	warm, err := idem.NewKey("warm-up", "Op", strconv.FormatInt(time.Now().UnixNano(), 36))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = s.Claim(ctx, idem.ClaimRequest{Key: warm, Token: 1, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Renew(ctx, warm, 1, time.Second))
	require.NoError(t, s.Release(ctx, warm, 1))
	_, err = s.Claim(ctx, idem.ClaimRequest{Key: warm, Token: 1, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, warm, 1, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute))
	require.NoError(t, s.Seed(ctx, warm, idem.Record{Status: idem.StatusSucceeded, Fingerprint: idem.Fingerprint{}, Token: 1, Outcome: idem.Outcome{Status: idem.StatusSucceeded}}, time.Minute))
	return s, p
}

// dropFor arms p to drop the reply of the next command on the record of k.
func dropFor(p *lossyproxy.Proxy, s *redisstore.Store, k idem.Key) {
	rk := []byte(s.RedisKey(k))
	p.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, rk) })
}

// TestLostReplies: each operation is applied by Redis, its reply is lost on
// the wire, and go-redis sends it again; the repeated command must answer
// the caller's success.
func TestLostReplies(t *testing.T) {
	s, p := lossy(t, 3)
	ctx := t.Context()
	tenant := "lossy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	key := func(id string) idem.Key {
		k, err := idem.NewKey(tenant, "Op", id)
		require.NoError(t, err)
		return k
	}
	k := key("a")
	req := idem.ClaimRequest{Key: k, Token: 11, Lease: time.Minute, TTL: time.Hour, Scheme: 2}
	req.Fingerprint[0] = 1

	dropFor(p, s, k)
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	assert.True(t, c.Claimed, "a claim whose reply was lost and which go-redis sent again is the caller's")
	require.Equal(t, 1, p.Dropped(), "the proxy dropped the claim's reply")

	dropFor(p, s, k)
	require.NoError(t, s.Renew(ctx, k, req.Token, 2*time.Minute), "a renewal whose reply was lost")

	dropFor(p, s, k)
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("receipt")}
	require.NoError(t, s.Complete(ctx, k, req.Token, out, time.Hour), "an outcome whose reply was lost is stored: success")
	require.Equal(t, 3, p.Dropped())

	other := req
	other.Token = 12
	c, err = s.Claim(ctx, other)
	require.NoError(t, err)
	require.False(t, c.Claimed)
	assert.Equal(t, []byte("receipt"), c.Record.Outcome.Body)
	assert.Equal(t, uint32(2), c.Record.Scheme)

	k2 := key("b")
	req.Key = k2
	c, err = s.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	dropFor(p, s, k2)
	require.NoError(t, s.Release(ctx, k2, req.Token), "a release whose reply was lost")
	other.Key = k2
	c, err = s.Claim(ctx, other)
	require.NoError(t, err)
	assert.True(t, c.Claimed, "the released key is free")
	assert.False(t, c.TakenOver)
	assert.Equal(t, 4, p.Dropped())
}

// TestLostRepliesThroughExecutor: a wrapped call whose claim reply, then
// whose outcome reply, is lost gets its own success, runs once, and is
// replayed; with go-redis' retries off, the executor's own retry of
// Complete meets the stored outcome.
func TestLostRepliesThroughExecutor(t *testing.T) {
	for _, retries := range []int{3, -1} {
		t.Run("MaxRetries="+strconv.Itoa(retries), func(t *testing.T) {
			s, p := lossy(t, retries)
			ctx := t.Context()
			tenant := "lossy-ex-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			ex := idem.NewExecutor(s, idem.WithTenant(func(context.Context) string { return tenant }), idem.WithLease(time.Minute))
			m := idem.Method{Op: "Orders.Pay", TTL: time.Hour}
			k, err := idem.NewKey(tenant, m.Op, "order-1")
			require.NoError(t, err)
			var runs atomic.Int32
			fn := func(context.Context) (string, error) {
				runs.Add(1)
				dropFor(p, s, k) // the next command on the record is Complete
				return "receipt-1", nil
			}
			if retries >= 0 {
				dropFor(p, s, k) // the claim's reply too
			}
			v, err := pay(ctx, ex, &m, "order-1", 100, fn)
			require.NoError(t, err, "a call whose replies were lost succeeded: the caller is told so")
			assert.Equal(t, "receipt-1", v)
			assert.Equal(t, map[bool]int{true: 2, false: 1}[retries >= 0], p.Dropped())
			assert.Zero(t, p.Pending())

			v, err = pay(ctx, ex, &m, "order-1", 100, func(context.Context) (string, error) { runs.Add(1); return "receipt-2", nil })
			require.NoError(t, err)
			assert.Equal(t, "receipt-1", v, "the stored outcome is replayed")
			assert.Equal(t, int32(1), runs.Load(), "the method ran once")
		})
	}
}
