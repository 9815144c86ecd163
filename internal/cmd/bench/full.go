package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// fullConfig sizes the full-store section.
type fullConfig struct {
	sizes    []int         // records in the full store
	refusals int           // refused claims timed per size
	replay   time.Duration // length of each replay phase (with and without the flood)
}

// runFull measures a full store under a flood of new keys (issue 26): the
// cost of a refused claim against the cost of an admitted one, and the p99
// of replays of existing keys while a flood is refused against the same p99
// without it.
func runFull(ctx context.Context, w io.Writer, log func(string, ...any), cfg fullConfig, redisAddr string) error {
	start := time.Now()
	fmt.Fprintf(w, "\n## A full store under a flood of new keys\n\n"+
		"memstore with `WithMaxRecords(n)` filled with n live records (half of them completed), `WithTenantShare(0)` so that the flood "+
		"meets the store's own bound. **refusal**: the median time of %d claims of new keys, each refused with `ErrStoreFull` and timed one by one; **claim**: "+
		"the median time of as many admitted claims of new keys (each released again) on the same store with room for them. "+
		"**replay p99**: one goroutine replays existing keys (store `Claim` of a completed key) for %v, alone and then beside one goroutine "+
		"sending new keys as fast as they are refused (the aim is a ratio ≤ 1.5×), and, for comparison, beside one goroutine replaying "+
		"other keys as fast: the load of as many calls that are not refused.\n\n", cfg.refusals, cfg.replay)
	fmt.Fprintf(w, "| store | records | refusal | claim | refusal ÷ claim | replay p99 alone | under the flood | ratio | refusals during the flood | under a flood of replays |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range cfg.sizes {
		log("full: memstore, %d records", n)
		r, err := fullMemstore(ctx, n, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| memory | %d | %v | %v | %.2f× | %v | %v | %.2f× | %d | %v |\n", n, r.refusal, r.claim,
			float64(r.refusal)/float64(r.claim), r.p99Alone, r.p99Flood, float64(r.p99Flood)/float64(r.p99Alone), r.floodRefusals, r.p99Busy)
	}
	if redisAddr != "" {
		log("full: redis, tenant share")
		r, err := fullRedisShare(ctx, redisAddr, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| redis, a tenant over `WithTenantShare` | %d | %v | %v | %.2f× | %v | %v | %.2f× | %d | %v |\n", r.n, r.refusal, r.claim,
			float64(r.refusal)/float64(r.claim), r.p99Alone, r.p99Flood, float64(r.p99Flood)/float64(r.p99Alone), r.floodRefusals, r.p99Busy)
	} else {
		fmt.Fprintf(w, "\nRedis skipped (no IDEM_REDIS_ADDR).\n")
	}
	fmt.Fprintf(w, "\n(%s)\n", time.Since(start).Round(time.Second))
	return nil
}

// timeClaims claims each of keys on s, timing each call, and returns the
// median time. With admit, every claim must be admitted (and is released
// again, untimed); without it, every claim must be refused with
// ErrStoreFull.
func timeClaims(ctx context.Context, s idem.Store, keys []idem.Key, admit bool) (time.Duration, error) {
	ds := make([]time.Duration, 0, len(keys))
	for _, k := range keys {
		t := time.Now()
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 2, Lease: time.Minute, TTL: time.Hour})
		ds = append(ds, time.Since(t))
		switch {
		case admit && (err != nil || !c.Claimed):
			return 0, fmt.Errorf("a claim that should be admitted: %+v, %v", c, err)
		case admit:
			if err := s.Release(ctx, k, 2); err != nil {
				return 0, err
			}
		case !errors.Is(err, idem.ErrStoreFull):
			return 0, fmt.Errorf("a claim that should be refused: %+v, %v", c, err)
		}
	}
	return median(ds), nil
}

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

type fullResult struct {
	n                  int
	refusal, claim     time.Duration
	p99Alone, p99Flood time.Duration
	p99Busy            time.Duration // beside a flood of replays instead
	floodRefusals      int64
}

func fullKey(tenant, prefix string, i int) idem.Key {
	k, err := idem.NewKey(tenant, "bench.Full", prefix+strconv.Itoa(i))
	if err != nil {
		panic(err)
	}
	return k
}

// fullMemstore fills a memstore of n records and measures it.
func fullMemstore(ctx context.Context, n int, cfg fullConfig) (fullResult, error) {
	r := fullResult{n: n}
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithTenantShare(0))
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`{"ok":true}`)}
	for i := range n {
		k := fullKey("t", "old", i)
		if _, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour}); err != nil {
			return r, err
		}
		if i%2 == 0 {
			if err := s.Complete(ctx, k, 1, out, time.Hour); err != nil {
				return r, err
			}
		}
	}
	newKeys := make([]idem.Key, cfg.refusals)
	for i := range newKeys {
		newKeys[i] = fullKey("t", "new", i)
	}
	var err error
	r.refusal, err = timeClaims(ctx, s, newKeys, false)
	if err != nil {
		return r, fmt.Errorf("memstore, %d records: %w", n, err)
	}
	// The same store with room: release one old record, then claim and
	// release new keys (a claim's own cost, the release timed apart).
	if err := s.Release(ctx, fullKey("t", "old", 1), 1); err != nil {
		return r, err
	}
	if r.claim, err = timeClaims(ctx, s, newKeys, true); err != nil {
		return r, fmt.Errorf("memstore, %d records: %w", n, err)
	}
	// Full again for the flood.
	if _, err := s.Claim(ctx, idem.ClaimRequest{Key: fullKey("t", "old", 1), Token: 1, Lease: time.Minute, TTL: time.Hour}); err != nil {
		return r, err
	}
	replay := func(i int) error {
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: fullKey("t", "old", 2*i), Token: 3, Lease: time.Minute, TTL: time.Hour})
		if err == nil && (c.Claimed || c.Record.Status != idem.StatusSucceeded) {
			err = fmt.Errorf("memstore: replay of a completed key: %+v", c)
		}
		return err
	}
	flood := func(i int) error {
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: fullKey("t", "flood", i), Token: 4, Lease: time.Minute, TTL: time.Hour})
		if err == nil {
			return fmt.Errorf("memstore: a flood claim was admitted")
		}
		return nil
	}
	return replayP99(ctx, r, n/2, cfg.replay, replay, flood)
}

// replayP99 measures the p99 of replay(i) for keys i < keys, for d alone,
// then for d beside a goroutine calling flood as fast as it returns, then
// for d beside a goroutine replaying as fast (the same load of calls that
// are not refused, for comparison).
func replayP99(ctx context.Context, r fullResult, keys int, d time.Duration, replay, flood func(int) error) (fullResult, error) {
	measure := func() (time.Duration, error) {
		var lat []time.Duration
		rng := rand.New(rand.NewPCG(1, 2))
		end := time.Now().Add(d)
		for time.Now().Before(end) && ctx.Err() == nil {
			i := rng.IntN(keys)
			t := time.Now()
			if err := replay(i); err != nil {
				return 0, err
			}
			lat = append(lat, time.Since(t))
		}
		slices.Sort(lat)
		if len(lat) == 0 {
			return 0, ctx.Err()
		}
		return lat[len(lat)*99/100], nil
	}
	beside := func(other func(int) error) (time.Duration, int64, error) {
		var stop atomic.Bool
		var calls atomic.Int64
		var otherErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if err := other(i); err != nil {
					otherErr = err
					return
				}
				calls.Add(1)
			}
		})
		p99, err := measure()
		stop.Store(true)
		wg.Wait()
		if err == nil {
			err = otherErr
		}
		return p99, calls.Load(), err
	}
	var err error
	if r.p99Alone, err = measure(); err != nil {
		return r, err
	}
	if r.p99Flood, r.floodRefusals, err = beside(flood); err != nil {
		return r, err
	}
	r.p99Busy, _, err = beside(func(i int) error { return replay((i * 7919) % keys) })
	return r, err
}

// fullRedisShare measures redisstore's tenant share on the Redis server at
// addr: a tenant that used its share floods new keys while another
// tenant's keys are replayed.
func fullRedisShare(ctx context.Context, addr string, cfg fullConfig) (fullResult, error) {
	const keys = 10_000
	r := fullResult{n: keys}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8})
	defer c.Close()
	prefix := "benchfull" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	defer func() {
		var cursor uint64
		for {
			ks, next, err := c.Scan(context.Background(), cursor, prefix+"*", 1000).Result()
			if err != nil {
				return
			}
			if len(ks) > 0 {
				c.Del(context.Background(), ks...)
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	}()
	s := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTenantShare(keys, time.Hour))
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`{"ok":true}`)}
	// The flooding tenant uses its share; the replayed tenant holds
	// completed keys.
	for i := range keys {
		for _, tenant := range []string{"flooder", "victim"} {
			k := fullKey(tenant, "old", i)
			if _, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour}); err != nil {
				return r, err
			}
			if tenant == "victim" {
				if err := s.Complete(ctx, k, 1, out, time.Hour); err != nil {
					return r, err
				}
			}
		}
	}
	refusals := min(cfg.refusals, 2000)
	floodKeys, otherKeys := make([]idem.Key, refusals), make([]idem.Key, refusals)
	for i := range refusals {
		floodKeys[i], otherKeys[i] = fullKey("flooder", "new", i), fullKey("other", "new", i)
	}
	var err error
	if r.refusal, err = timeClaims(ctx, s, floodKeys, false); err != nil {
		return r, fmt.Errorf("redis, over the share: %w", err)
	}
	// An admitted claim of a tenant under its share, released again.
	if r.claim, err = timeClaims(ctx, s, otherKeys, true); err != nil {
		return r, fmt.Errorf("redis, under the share: %w", err)
	}
	replay := func(i int) error {
		cl, err := s.Claim(ctx, idem.ClaimRequest{Key: fullKey("victim", "old", i), Token: 3, Lease: time.Minute, TTL: time.Hour})
		if err == nil && cl.Claimed {
			err = fmt.Errorf("redis: replay of a completed key claimed it")
		}
		return err
	}
	flood := func(i int) error {
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: fullKey("flooder", "flood", i), Token: 4, Lease: time.Minute, TTL: time.Hour})
		if err == nil {
			return fmt.Errorf("redis: a flood claim was admitted")
		}
		return nil
	}
	return replayP99(ctx, r, keys, cfg.replay, replay, flood)
}
