package redisstore_test

import (
	"context"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// pay is a wrapped method, written exactly as idemgen generates one for
//
//	//idem:key=orderID
//	func (s *T) Pay(ctx context.Context, orderID string, amount int64) (string, error)
func pay(ctx context.Context, ex *idem.Executor, m *idem.Method, orderID string, amount int64, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("orderID", orderID)
	var h idem.Hasher
	h.String(orderID)
	h.Int(amount)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

// The documented limit: when Redis loses an acknowledged record (here
// deleted, as a failover to a lagging replica would), the retry executes
// the method again. runtime/tiered closes this gap.
func TestKeyLostExecutesTwice(t *testing.T) {
	c := client(t)
	s := redisstore.New(c, redisstore.WithPrefix("idemtest-lost:"))
	tenant := "lost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ex := idem.NewExecutor(s, idem.WithTenant(func(context.Context) string { return tenant }))
	m := idem.Method{Op: "Orders.Pay", TTL: time.Minute}
	ctx := t.Context()
	var runs atomic.Int32
	fn := func(context.Context) (string, error) { return "receipt-" + strconv.Itoa(int(runs.Add(1))), nil }

	first, err := pay(ctx, ex, &m, "order-1", 100, fn)
	require.NoError(t, err)
	again, err := pay(ctx, ex, &m, "order-1", 100, fn)
	require.NoError(t, err)
	assert.Equal(t, first, again, "while Redis keeps the record, a retry replays")
	assert.Equal(t, int32(1), runs.Load())

	key, err := idem.NewKey(tenant, m.Op, "order-1")
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Del(ctx, s.RedisKey(key)).Val(), "the record is one Redis key")

	third, err := pay(ctx, ex, &m, "order-1", 100, fn)
	require.NoError(t, err)
	assert.Equal(t, int32(2), runs.Load(), "a lost record executes again: redisstore's documented limit")
	assert.NotEqual(t, first, third)
}

// A record is one string under a hash-tagged key, in a binary layout, and
// expires Redis-side; its lease is read from the key's PTTL.
func TestRecordLayout(t *testing.T) {
	c := client(t)
	s := redisstore.New(c, redisstore.WithPrefix("idemtest-layout:"))
	ctx := t.Context()
	key, err := idem.NewKey("layout-"+strconv.FormatInt(time.Now().UnixNano(), 36), "Op", "a")
	require.NoError(t, err)
	rk := s.RedisKey(key)
	assert.Equal(t, "idemtest-layout:r{"+key.Hex()+"}", rk)

	req := idem.ClaimRequest{Key: key, Token: 0x0102030405060708, Lease: time.Second, TTL: time.Minute, Scheme: 4_000_000_000}
	req.Fingerprint[0] = 0xff
	cl, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, cl.Claimed)
	head := "1" + string(req.Fingerprint[:]) + "\x01\x02\x03\x04\x05\x06\x07\x08" + "4000000000:"
	assert.Equal(t, head+"59000", c.Get(ctx, rk).Val(), "a PROCESSING record: head, then the life left when its lease lapses")
	assert.Greater(t, c.PTTL(ctx, rk).Val(), 59*time.Second)

	require.NoError(t, s.Complete(ctx, key, req.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok"), Meta: []byte("m")}, 2*time.Minute))
	assert.Equal(t, "2"+head[1:]+"0:0:1:mok", c.Get(ctx, rk).Val(), "a final record: head, lengths, fields, body")
	assert.Greater(t, c.PTTL(ctx, rk).Val(), 119*time.Second)
	assert.Equal(t, "string", c.Type(ctx, rk).Val())

	assert.Panics(t, func() { redisstore.New(c, redisstore.WithPrefix("a{b}:")) })
}

// A record of the hash layout of earlier releases (prefix + "{id}") is
// never read: the string layout's keys differ ("r{id}"), so a store of
// either release never meets the other's type (no WRONGTYPE).
func TestOldLayoutIgnored(t *testing.T) {
	c := client(t)
	s := redisstore.New(c, redisstore.WithPrefix("idemtest-old:"))
	ctx := t.Context()
	key, err := idem.NewKey("old-"+strconv.FormatInt(time.Now().UnixNano(), 36), "Op", "a")
	require.NoError(t, err)
	old := "idemtest-old:{" + key.Hex() + "}"
	require.NoError(t, c.HSet(ctx, old, "s", "2", "b", "stored before").Err())
	require.NoError(t, c.PExpire(ctx, old, time.Minute).Err())
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Token: 1, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	assert.True(t, cl.Claimed, "the new layout does not see the old record")
	assert.Equal(t, "hash", c.Type(ctx, old).Val(), "the old record is left to expire")
}

// Seed writes an outcome over an absent or PROCESSING record, never over a
// final one.
func TestSeed(t *testing.T) {
	c := client(t)
	s := redisstore.New(c, redisstore.WithPrefix("idemtest-seed:"))
	ctx := t.Context()
	key, err := idem.NewKey("seed-"+strconv.FormatInt(time.Now().UnixNano(), 36), "Op", "a")
	require.NoError(t, err)
	var fp idem.Fingerprint
	fp[3] = 9
	require.NoError(t, s.Seed(ctx, key, idem.Record{Status: idem.StatusSucceeded, Fingerprint: fp, Scheme: 12, Token: 7, Outcome: idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("first"), Meta: []byte("m")}}, time.Minute))
	require.NoError(t, s.Seed(ctx, key, idem.Record{Status: idem.StatusSucceeded, Fingerprint: fp, Token: 8, Outcome: idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("second")}}, time.Minute))
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 9, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	require.False(t, cl.Claimed)
	assert.Equal(t, idem.StatusSucceeded, cl.Record.Status)
	assert.Equal(t, fp, cl.Record.Fingerprint)
	assert.Equal(t, idem.Token(7), cl.Record.Token)
	assert.Equal(t, uint32(12), cl.Record.Scheme, "the seeded record keeps its scheme")
	assert.Equal(t, []byte("first"), cl.Record.Outcome.Body, "the first outcome wins")
	assert.Equal(t, []byte("m"), cl.Record.Outcome.Meta)

	other, err := idem.NewKey(key.Tenant, "Op", "b")
	require.NoError(t, err)
	cl, err = s.Claim(ctx, idem.ClaimRequest{Key: other, Fingerprint: fp, Token: 1, Lease: time.Second, TTL: time.Minute, Scheme: 5})
	require.NoError(t, err)
	require.True(t, cl.Claimed)
	require.NoError(t, s.Seed(ctx, other, idem.Record{Status: idem.StatusFailedFinal, Fingerprint: fp, Token: 2, Outcome: idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "E", ErrMessage: "no"}}, time.Minute))
	assert.ErrorIs(t, s.Complete(ctx, other, 1, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute), idem.ErrLeaseLost,
		"a seeded outcome replaces the claim")
	cl, err = s.Claim(ctx, idem.ClaimRequest{Key: other, Fingerprint: fp, Token: 3, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, idem.StatusFailedFinal, cl.Record.Status)
	assert.Equal(t, "E", cl.Record.Outcome.ErrCode)
	assert.Equal(t, "no", cl.Record.Outcome.ErrMessage)
	assert.Equal(t, uint32(0), cl.Record.Scheme, "the seeded scheme (0) replaces the claim's (5)")

	assert.Error(t, s.Seed(ctx, key, idem.Record{Status: idem.StatusFailedFinal, Outcome: idem.Outcome{Status: idem.StatusSucceeded}}, time.Minute),
		"a record whose status differs from its outcome's is refused")
	assert.Error(t, s.Seed(ctx, key, idem.Record{Status: idem.StatusProcessing, Fingerprint: fp, Token: 1, Outcome: idem.Outcome{Status: idem.StatusProcessing}}, time.Minute))
}

// TestRedisFull: a Redis server at its maxmemory under noeviction refuses
// claims with an error wrapping idem.ErrStoreFull; records are kept.
func TestRedisFull(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (scripts/redis.sh installs it)")
	}
	p, err := freeport.Pick(0)
	require.NoError(t, err)
	t.Cleanup(func() { freeport.Release(p) })
	port := strconv.Itoa(p)
	addr := "127.0.0.1:" + port
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond, "redis-server on %s", addr)

	s := redisstore.New(c)
	key := func(id string) idem.Key {
		k, err := idem.NewKey("full", "Op", id)
		require.NoError(t, err)
		return k
	}
	counter := &commandCounter{}
	c.AddHook(counter)
	held := idem.ClaimRequest{Key: key("held"), Token: 1, Lease: time.Minute, TTL: time.Hour}
	done := idem.ClaimRequest{Key: key("done"), Token: 2, Lease: time.Minute, TTL: time.Hour}
	released := idem.ClaimRequest{Key: key("released"), Token: 6, Lease: time.Minute, TTL: time.Hour}
	for _, r := range []idem.ClaimRequest{held, done, released} {
		cl, err := s.Claim(ctx, r)
		require.NoError(t, err)
		require.True(t, cl.Claimed)
	}
	require.NoError(t, s.Complete(ctx, done.Key, done.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("r")}, time.Hour))
	testenv.FillRedis(t, c)

	k := key("new")
	n := counter.commands(func() {
		_, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 3, Lease: time.Second, TTL: time.Minute})
	})
	require.ErrorIs(t, err, idem.ErrStoreFull, "a new claim on a full Redis is refused")
	assert.Contains(t, err.Error(), "redisstore: claim "+k.Hex())
	assert.Equal(t, int64(2), n, "a refusal costs the refused SET and a GET, as a claim costs")

	again := done
	again.Token = 4
	cl, err := s.Claim(ctx, again)
	require.NoError(t, err, "a full Redis still replays (a refused SET falls back to GET)")
	assert.Equal(t, []byte("r"), cl.Record.Outcome.Body)
	require.NoError(t, s.Complete(ctx, held.Key, held.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("h")}, time.Hour),
		"a full Redis still stores an outcome (the complete script is flagged allow-oom)")
	cl, err = s.Claim(ctx, idem.ClaimRequest{Key: held.Key, Token: 5, Lease: time.Second, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, []byte("h"), cl.Record.Outcome.Body)
	require.NoError(t, s.Release(ctx, released.Key, released.Token), "a full Redis still releases")
	require.ErrorIs(t, c.Get(ctx, s.RedisKey(released.Key)).Err(), redis.Nil)
}
