package tiered_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// redisClient returns a client of the shared test Redis server.
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(t.Context()).Err())
	return c
}

// events counts observer events by kind.
type events struct {
	mu sync.Mutex
	n  map[tiered.EventKind]int
}

func (e *events) observe(ev tiered.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[tiered.EventKind]int{}
	}
	e.n[ev.Kind]++
}

func (e *events) count(k tiered.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

// The tier logic on the in-memory store, which is no Seeder: no repairs.
func TestConformanceMemoryTiers(t *testing.T) {
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return tiered.New(memstore.New(), memstore.New()) },
		// The durable store's bound is the tiered store's: a refused claim
		// leaves nothing behind in the fast store either.
		NewBounded: func(_ *testing.T, n int) idem.Store {
			return tiered.New(memstore.New(), memstore.New(memstore.WithMaxRecords(n), memstore.WithTenantShare(0)))
		},
	})
}

// Redis in front of the in-memory store: the tier logic with repairs,
// without PostgreSQL.
func TestConformanceRedisMemory(t *testing.T) {
	c := redisClient(t)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix("tiered-mem:")), memstore.New())
		},
	})
}

// brokenStore fails every call, at once or after hanging.
type brokenStore struct {
	hang  bool
	calls atomic.Int64
}

var errBroken = errors.New("broken fast store")

func (b *brokenStore) wait(ctx context.Context) error {
	b.calls.Add(1)
	if b.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errBroken
}

func (b *brokenStore) Claim(ctx context.Context, _ idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, b.wait(ctx)
}

func (b *brokenStore) Complete(ctx context.Context, _ idem.Key, _ idem.Token, _ idem.Outcome, _ time.Duration) error {
	return b.wait(ctx)
}

func (b *brokenStore) Release(ctx context.Context, _ idem.Key, _ idem.Token) error {
	return b.wait(ctx)
}

// A fast store that fails on every call: the tiered store is the durable
// store alone, and says so.
func TestConformanceFastFailing(t *testing.T) {
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "Erroring", true: "Hanging"}[hang]
		t.Run(name, func(t *testing.T) {
			var ev events
			fast := &brokenStore{hang: hang}
			idemtest.Run(t, idemtest.Options{
				NewStore: func(*testing.T) idem.Store {
					return tiered.New(fast, memstore.New(), tiered.WithCooldown(0),
						tiered.WithFastTimeout(5*time.Millisecond), tiered.WithObserver(ev.observe))
				},
			})
			t.Cleanup(func() {
				assert.Positive(t, fast.calls.Load())
				// A detached fast call whose timeout passed before its
				// goroutine ran is reported before it reaches the store:
				// wait for the stragglers, not for a time.
				assert.Eventually(t, func() bool { return int(fast.calls.Load()) == ev.count(tiered.EventFastError) },
					time.Minute, time.Millisecond, "every fast error is reported: %d calls, %d events",
					fast.calls.Load(), ev.count(tiered.EventFastError))
			})
		})
	}
}

// With a cool-down, a failing fast store is skipped, then probed again.
func TestCooldown(t *testing.T) {
	var ev events
	fast := &brokenStore{}
	var elapsed atomic.Int64 // the virtual clock: no wall-clock margin to keep
	now := func() time.Time { return time.Unix(0, elapsed.Load()) }
	s := tiered.New(fast, memstore.New(), tiered.WithCooldown(50*time.Millisecond), tiered.WithObserver(ev.observe),
		tiered.WithClock(now))
	ctx := t.Context()
	claim := func(id string) {
		k, err := idem.NewKey("t", "op", id)
		require.NoError(t, err)
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Second, TTL: time.Minute})
		require.NoError(t, err)
		require.True(t, c.Claimed)
	}
	for i := range 10 {
		claim(string(rune('a' + i)))
	}
	assert.Equal(t, int64(1), fast.calls.Load(), "the fast store is skipped during the cool-down")
	assert.Equal(t, 1, ev.count(tiered.EventDegraded))
	elapsed.Add(int64(49 * time.Millisecond))
	claim("still cooling")
	assert.Equal(t, int64(1), fast.calls.Load(), "the cool-down lasts its whole length")
	elapsed.Add(int64(time.Millisecond))
	claim("probe")
	assert.Equal(t, int64(2), fast.calls.Load(), "after the cool-down the fast store is probed")
	assert.Equal(t, 1, ev.count(tiered.EventDegraded), "still down: no second degraded event")
}

// A durable store that is down fails the call with ErrDurable; the method
// does not run unprotected.
func TestDurableDown(t *testing.T) {
	s := tiered.New(memstore.New(), &brokenStore{})
	ex := idem.NewExecutor(s, idem.SingleTenant())
	m := idem.Method{Op: "op", TTL: time.Minute}
	ran := false
	_, err := call(t.Context(), ex, &m, "k1", "p", func(context.Context) (string, error) { ran = true; return "x", nil })
	require.ErrorIs(t, err, tiered.ErrDurable)
	assert.ErrorIs(t, err, errBroken)
	assert.False(t, ran, "nothing runs without the durable store's claim")
}

// call is a wrapped method, written exactly as idemgen generates one for
//
//	//idem:key=id
//	func (s *T) M(ctx context.Context, id, payload string) (string, error)
func call(ctx context.Context, ex *idem.Executor, m *idem.Method, id, payload string, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(id)
	h.String(payload)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

// A record repaired into the fast store keeps everything the durable store
// holds, the fingerprint scheme included, so that its replays from the fast
// store report the scheme of the claim that created it.
func TestRepairKeepsRecord(t *testing.T) {
	ctx := t.Context()
	durable := memstore.New()
	k, err := idem.NewKey("t", "op", "a")
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Fingerprint: idem.Fingerprint{1, 2, 3}, Token: 41, Lease: time.Second, TTL: time.Minute, Scheme: 7}
	first := tiered.New(memstore.New(), durable)
	c, err := first.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("body"), Meta: []byte("meta")}
	require.NoError(t, first.Complete(ctx, k, req.Token, out, time.Minute))

	// A fast store that lost the record (a fresh one) is repaired by the
	// next claim, here a retry from another release whose fingerprint
	// scheme is newer.
	fast := memstore.New()
	var ev events
	s := tiered.New(fast, durable, tiered.WithObserver(ev.observe))
	retry := req
	retry.Token, retry.Scheme = 42, 8
	c, err = s.Claim(ctx, retry)
	require.NoError(t, err)
	require.False(t, c.Claimed)
	require.Equal(t, 1, ev.count(tiered.EventRepaired))

	c, err = fast.Claim(ctx, retry)
	require.NoError(t, err)
	require.False(t, c.Claimed, "the fast store holds the repaired record")
	want := idem.Record{Status: idem.StatusSucceeded, Fingerprint: req.Fingerprint, Scheme: req.Scheme, Token: req.Token, Outcome: out}
	assert.Equal(t, want, c.Record, "the repaired record is the durable one, scheme included")
}
