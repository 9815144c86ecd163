package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// Redis in front of PostgreSQL: the configuration the package is for.
func TestConformance(t *testing.T) {
	c := redisClient(t)
	pg := pgStore(t)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix("tiered:")), pg)
		},
		// PostgreSQL down or never migrated, Redis up: the durable store
		// decides every claim.
		Down: func(t *testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix("tiered:")), pgstore.New(downPool(t)))
		},
		Unmigrated: func(t *testing.T) idem.Store {
			return tiered.New(redisstore.New(c, redisstore.WithPrefix("tiered:")), pgstore.New(pg.Pool(), pgstore.WithTable("idem_never_migrated")))
		},
	})
}

// Redis in front of PostgreSQL in transactional mode: the claim, the
// method's writes and the outcome are one PostgreSQL transaction.
func TestConformanceTx(t *testing.T) {
	c := redisClient(t)
	pg := pgTxStore(t)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store {
			return tiered.NewTx(redisstore.New(c, redisstore.WithPrefix("tiered-tx:")), pg)
		},
		Transactional: true,
		BreakTx:       testenv.BreakPGTx(pg.Pool()),
		Down: func(t *testing.T) idem.Store {
			return tiered.NewTx(redisstore.New(c, redisstore.WithPrefix("tiered-tx:")), pgstore.NewTx(downPool(t)))
		},
		Unmigrated: func(t *testing.T) idem.Store {
			return tiered.NewTx(redisstore.New(c, redisstore.WithPrefix("tiered-tx:")), pgstore.NewTx(pg.Pool(), pgstore.WithTable("idem_never_migrated")))
		},
	})
}

// uniqueTenant returns a tenant no other run of the test uses (the
// PostgreSQL table outlives the test).
func uniqueTenant(t *testing.T) string {
	return t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func executor(s idem.Store, tenant string) *idem.Executor {
	return idem.NewExecutor(s, idem.WithTenant(func(context.Context) string { return tenant }))
}

// The failover story: the first call's record vanishes from Redis before
// the retry. The retry replays from PostgreSQL (the method runs once), and
// the record is repaired into Redis, which serves the next retry alone: in
// lease mode (Store) and in transactional mode (TxStore).
func TestRedisKeyLost(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(map[bool]string{false: "Lease", true: "Tx"}[tx], func(t *testing.T) {
			c := redisClient(t)
			fast := redisstore.New(c, redisstore.WithPrefix("tiered-lost:"))
			var ev events
			// A fast timeout no loaded machine reaches: every Redis call
			// must answer, since the test counts repairs and the calls
			// that reach PostgreSQL (with the default 100ms, a slow Redis
			// call under load went to PostgreSQL and failed the count).
			opts := []tiered.Option{tiered.WithObserver(ev.observe), tiered.WithFastTimeout(10 * time.Second)}
			var store idem.Store
			var claims *atomic.Int64
			if tx {
				durable := &countingTxStore{TxStore: pgTxStore(t)}
				store, claims = tiered.NewTx(fast, durable, opts...), &durable.claims
			} else {
				durable := &countingStore{Store: pgStore(t)}
				store, claims = tiered.New(fast, durable, opts...), &durable.claims
			}
			tn := uniqueTenant(t)
			ex := executor(store, tn)
			m := idem.Method{Op: "Orders.Pay", TTL: time.Minute}
			ctx := t.Context()
			var runs atomic.Int32
			pay := func(context.Context) (string, error) { return "receipt-" + strconv.Itoa(int(runs.Add(1))), nil }

			first, err := call(ctx, ex, &m, "order-1", "100", pay)
			require.NoError(t, err)
			key, err := idem.NewKey(tn, m.Op, "order-1")
			require.NoError(t, err)
			require.Equal(t, int64(1), claims.Load())
			before := claims.Load()
			again, err := call(ctx, ex, &m, "order-1", "100", pay)
			require.NoError(t, err)
			assert.Equal(t, first, again)
			assert.Equal(t, before, claims.Load(), "a replay found in Redis does not reach PostgreSQL")

			deleted, err := c.Del(ctx, fast.RedisKey(key)).Result()
			require.NoError(t, err)
			require.Equal(t, int64(1), deleted, "the record was in Redis")
			again, err = call(ctx, ex, &m, "order-1", "100", pay)
			require.NoError(t, err)
			assert.Equal(t, first, again, "the retry replays the first outcome")
			assert.Equal(t, int32(1), runs.Load(), "the method ran once")
			assert.Equal(t, 1, ev.count(tiered.EventRepaired))
			assert.Equal(t, int64(1), c.Exists(ctx, fast.RedisKey(key)).Val(), "the record is back in Redis")

			before = claims.Load()
			third, err := call(ctx, ex, &m, "order-1", "100", pay)
			require.NoError(t, err)
			assert.Equal(t, first, third)
			assert.Equal(t, before, claims.Load(), "a replay found in Redis does not reach PostgreSQL")
			_, err = call(ctx, ex, &m, "order-1", "999", pay)
			assert.ErrorIs(t, err, idem.ErrPayloadMismatch, "the repaired record keeps its fingerprint")
			assert.Equal(t, int32(1), runs.Load())
		})
	}
}

// fastClient is a client tuned to fail fast when its server is gone.
func fastClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: 64, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond, PoolTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redis-server is SIGKILLed in the middle of a run of concurrent calls (each
// key called by several callers at once), and restarted empty. Every key
// executes exactly once; the calls during the outage succeed through
// PostgreSQL.
func TestRedisKilled(t *testing.T) {
	srv := startRedis(t)
	c := fastClient(t, srv.Addr)
	durable := pgStore(t)
	var ev events
	s := tiered.New(redisstore.New(c), durable, tiered.WithObserver(ev.observe),
		tiered.WithFastTimeout(100*time.Millisecond), tiered.WithCooldown(50*time.Millisecond))
	ex := executor(s, uniqueTenant(t))
	m := idem.Method{Op: "Orders.Pay", TTL: time.Minute, Lease: 10 * time.Second, Wait: 20 * time.Second}

	const keys, callers, workers = 240, 3, 24
	runs := make([]atomic.Int32, keys)
	queue := make(chan int, keys*callers)
	for _, i := range rand.Perm(keys * callers) {
		queue <- i % keys
	}
	close(queue)

	var done, duringOutage atomic.Int32
	var down atomic.Bool
	var errs sync.Map
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range queue {
				v, err := call(t.Context(), ex, &m, id(k), "100", func(context.Context) (string, error) {
					runs[k].Add(1)
					time.Sleep(time.Millisecond)
					return "receipt-" + id(k), nil
				})
				if err == nil && v != "receipt-"+id(k) {
					err = assert.AnError
				}
				if err != nil {
					errs.Store(k, err)
				}
				if down.Load() {
					duringOutage.Add(1)
				}
				done.Add(1)
			}
		})
	}
	waitFor := func(n int32) {
		for done.Load() < n {
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(keys * callers / 3)
	down.Store(true)
	srv.Kill()
	waitFor(2 * keys * callers / 3)
	srv.Start()
	down.Store(false)
	wg.Wait()

	errs.Range(func(k, err any) bool {
		t.Errorf("%s: %v", id(k.(int)), err)
		return true
	})
	for k := range runs {
		assert.Equal(t, int32(1), runs[k].Load(), "%s: exactly one execution", id(k))
	}
	assert.Positive(t, duringOutage.Load(), "calls ran while Redis was down")
	assert.Positive(t, ev.count(tiered.EventDegraded), "the outage was reported")

	// Every key once more, now that Redis is back (empty): all replay, the
	// records completed before the kill are repaired into Redis.
	for k := range keys {
		v, err := call(t.Context(), ex, &m, id(k), "100", func(context.Context) (string, error) {
			runs[k].Add(1)
			return "again", nil
		})
		require.NoError(t, err)
		require.Equal(t, "receipt-"+id(k), v)
		require.Equal(t, int32(1), runs[k].Load(), "%s: exactly one execution", id(k))
	}
	assert.Positive(t, ev.count(tiered.EventRecovered), "the recovery was reported")
	assert.Positive(t, ev.count(tiered.EventRepaired), "records lost with the server were repaired")
	t.Logf("calls %d (during the outage %d); events: fast_error %d, degraded %d, recovered %d, repaired %d",
		done.Load(), duringOutage.Load(), ev.count(tiered.EventFastError), ev.count(tiered.EventDegraded),
		ev.count(tiered.EventRecovered), ev.count(tiered.EventRepaired))
}

// Redis under maxmemory with an eviction policy evicts records. Plain
// redisstore runs evicted keys again; tiered still runs each key once.
func TestRedisEviction(t *testing.T) {
	srv := startRedis(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	c := fastClient(t, srv.Addr)
	var ev events
	tn := uniqueTenant(t)
	tieredEx := executor(tiered.New(redisstore.New(c, redisstore.WithPrefix("t:")), pgStore(t), tiered.WithObserver(ev.observe)), tn)
	plainEx := executor(redisstore.New(c, redisstore.WithPrefix("p:")), tn)
	m := idem.Method{Op: "Orders.Export", TTL: time.Minute}
	body := strings.Repeat("x", 16<<10)

	const keys = 300 // 300 × 16 KiB ≈ 5 MB of records per store, in 3 MB
	pass := func(ex *idem.Executor, runs []atomic.Int32, plain bool) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for k := range keys {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				v, err := call(t.Context(), ex, &m, id(k), "p", func(context.Context) (string, error) {
					runs[k].Add(1)
					return body, nil
				})
				if plain && errors.Is(err, idem.ErrLeaseLost) {
					return // the PROCESSING record was evicted under the running call
				}
				if assert.NoError(t, err) {
					assert.Equal(t, len(body), len(v))
				}
			})
		}
		wg.Wait()
	}
	tieredRuns, plainRuns := make([]atomic.Int32, keys), make([]atomic.Int32, keys)
	for range 2 {
		pass(tieredEx, tieredRuns, false)
		pass(plainEx, plainRuns, true)
	}
	evicted, _ := strconv.Atoi(info(t, c, "evicted_keys"))
	require.Positive(t, evicted, "Redis evicted records")

	plainTwice := 0
	for k := range keys {
		assert.Equal(t, int32(1), tieredRuns[k].Load(), "tiered, %s: exactly one execution", id(k))
		if plainRuns[k].Load() > 1 {
			plainTwice++
		}
	}
	assert.Positive(t, ev.count(tiered.EventRepaired), "evicted records were repaired from PostgreSQL")
	t.Logf("evicted %d keys; plain redisstore executed %d of %d keys twice (its documented limit); tiered none, %d repairs",
		evicted, plainTwice, keys, ev.count(tiered.EventRepaired))
}

// A frozen redis-server (SIGSTOP: connections open, no answers) with a
// client whose own read timeout is the go-redis default of 3s: each call
// still waits no longer than the fast timeout, then goes on with PostgreSQL.
func TestRedisHangs(t *testing.T) {
	// The default client blocks until its 5s read timeout, so the fast calls
	// run on their own goroutines; with ContextTimeoutEnabled they run on the
	// caller's (the default, see BoundedBy), and end at the deadline.
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			testRedisHangs(t, ctxTimeout)
		})
	}
}

func testRedisHangs(t *testing.T, ctxTimeout bool) {
	srv := startRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { _ = c.Close() })
	require.Equal(t, ctxTimeout, redisstore.New(c).BoundedBy(50*time.Millisecond))
	var ev events
	s := tiered.New(redisstore.New(c), pgStore(t), tiered.WithObserver(ev.observe),
		tiered.WithFastTimeout(50*time.Millisecond), tiered.WithCooldown(0))
	ex := executor(s, uniqueTenant(t))
	m := idem.Method{Op: "Orders.Pay", TTL: time.Minute}
	var runs atomic.Int32
	fn := func(context.Context) (string, error) { runs.Add(1); return "ok", nil }
	_, err := call(t.Context(), ex, &m, "before", "p", fn) // warm the connection pool
	require.NoError(t, err)

	srv.Stop()
	defer srv.Cont()
	start := time.Now()
	for i := range 3 {
		v, err := call(t.Context(), ex, &m, id(i), "p", fn)
		require.NoError(t, err)
		assert.Equal(t, "ok", v)
		v, err = call(t.Context(), ex, &m, id(i), "p", fn)
		require.NoError(t, err, "the retry replays from PostgreSQL")
		assert.Equal(t, "ok", v)
	}
	elapsed := time.Since(start)
	assert.Equal(t, int32(4), runs.Load(), "each key ran once")
	// 3 keys × (claim + complete + claim) fast calls of at most 50ms each.
	assert.Less(t, elapsed, 2*time.Second, "calls do not wait for the client's 3s read timeout")
	assert.GreaterOrEqual(t, ev.count(tiered.EventFastError), 9)
	t.Logf("6 calls against a frozen Redis took %v", elapsed)
}
