package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// commandCounter is a go-redis hook counting the commands sent (a script
// sent by EVALSHA and again by EVAL counts twice).
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// commands returns how many commands f sent through c's hook.
func (c *commandCounter) commands(f func()) int64 {
	before := c.n.Load()
	f()
	return c.n.Load() - before
}

// TestTenantShare: with WithTenantShare, a tenant that created its share
// of records in the window is refused alone, with a *idem.TenantQuotaError
// that is still an ErrStoreFull, and the record the refused claim created
// is gone; other tenants and the single key space claim; the refused
// tenant's replays, claims repeated by their token and outcomes go on; a
// first refusal costs three commands, the next ones (within a second) and
// a replay one.
func TestTenantShare(t *testing.T) {
	c := client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	ctx := t.Context()
	prefix := "share" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	const share = 3
	s := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTenantShare(share, time.Hour))
	frozen := time.Now()
	redisstore.SetHintClock(s, func() time.Time { return frozen }) // the hint of a refusal lasts the whole test
	t.Cleanup(func() {
		keys, _ := c.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
	})
	req := func(tenant string, i int) idem.ClaimRequest {
		k, err := idem.NewKey(tenant, "op", strconv.Itoa(i))
		require.NoError(t, err)
		return idem.ClaimRequest{Key: k, Token: idem.Token(i + 1), Lease: time.Minute, TTL: time.Hour}
	}
	for i := range share {
		cl, err := s.Claim(ctx, req("a", i))
		require.NoError(t, err)
		require.True(t, cl.Claimed)
	}
	var err error
	refused := req("a", share)
	n := counter.commands(func() { _, err = s.Claim(ctx, refused) })
	require.ErrorIs(t, err, idem.ErrStoreFull)
	var q *idem.TenantQuotaError
	require.ErrorAs(t, err, &q)
	assert.Equal(t, "a", q.Tenant)
	assert.Equal(t, int64(share), q.Share)
	assert.Contains(t, err.Error(), "redisstore: claim "+refused.Key.Hex())
	assert.LessOrEqual(t, n, int64(3+2), "SET, the share script, the release (each script may be sent twice the first time)")
	require.ErrorIs(t, c.Get(ctx, s.RedisKey(refused.Key)).Err(), redis.Nil, "the refused claim left no record")
	n = counter.commands(func() { _, err = s.Claim(ctx, refused) })
	require.ErrorAs(t, err, &q, "refused again")
	assert.Equal(t, int64(1), n, "a refusal right after one costs a GET")
	require.ErrorIs(t, c.Get(ctx, s.RedisKey(refused.Key)).Err(), redis.Nil, "and creates nothing")

	for i := range share {
		cl, err := s.Claim(ctx, req("b", i))
		require.NoError(t, err, "another tenant is not refused")
		require.True(t, cl.Claimed)
	}
	for i := range 2 * share {
		_, err := s.Claim(ctx, req("", i))
		require.NoError(t, err, "the single key space has no share")
	}

	cl, err := s.Claim(ctx, req("a", 0))
	require.NoError(t, err)
	require.True(t, cl.Claimed, "a claim repeated by its token")
	require.NoError(t, s.Complete(ctx, req("a", 0).Key, 1, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("done")}, time.Hour))
	again := req("a", 0)
	again.Token = 99
	n = counter.commands(func() { cl, err = s.Claim(ctx, again) })
	require.NoError(t, err)
	assert.Equal(t, []byte("done"), cl.Record.Outcome.Body, "a replay for the refused tenant")
	assert.Equal(t, int64(1), n, "a replay costs one command, share or not")
	require.NoError(t, s.Release(ctx, req("a", 1).Key, 2), "the refused tenant releases")

	// Once the hint has passed, a claim counts again (and is refused).
	frozen = frozen.Add(2 * time.Second)
	n = counter.commands(func() { _, err = s.Claim(ctx, refused) })
	require.ErrorAs(t, err, &q)
	assert.Equal(t, int64(3), n, "after the hint, SET, the share script and the release")

	// The counter is per window: a new window counts the previous one, so
	// the share holds across a window's end.
	ttl, err := c.PTTL(ctx, s.TenantKey("a")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Hour, "the counter lives two windows")
}

// TestTenantShareOptions: WithTenantShare refuses a negative share and a
// window under a millisecond.
func TestTenantShareOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	assert.Panics(t, func() { redisstore.New(c, redisstore.WithTenantShare(-1, time.Hour)) })
	assert.Panics(t, func() { redisstore.New(c, redisstore.WithTenantShare(1, 0)) })
	assert.NotPanics(t, func() { redisstore.New(c, redisstore.WithTenantShare(0, 0)) })
}
