package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// sweep is idemtest's Options.Sweep for memstore.
func sweep(ctx context.Context, s idem.Store, limit int) (int, error) {
	return s.(*memstore.Store).Sweep(ctx, limit)
}

func TestConformanceFakeClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return memstore.New(memstore.WithClock(clock.Now)) },
		NewBounded: func(_ *testing.T, n int) idem.Store {
			// The store's bound alone (a tenant share is tested below).
			return memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxRecords(n), memstore.WithTenantShare(0))
		},
		Sweep: sweep,
		Sleep: clock.Advance,
	})
}

func TestConformanceRealClock(t *testing.T) {
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return memstore.New() },
		NewBounded: func(_ *testing.T, n int) idem.Store {
			return memstore.New(memstore.WithMaxRecords(n), memstore.WithTenantShare(0))
		},
		Sweep: sweep,
	})
}

func claimN(t *testing.T, s *memstore.Store, prefix string, n int, ttl time.Duration) {
	t.Helper()
	for i := range n {
		k, err := idem.NewKey("", "op", prefix, strconv.Itoa(i))
		require.NoError(t, err)
		c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: ttl, TTL: ttl})
		require.NoError(t, err)
		require.True(t, c.Claimed)
	}
}

// TestExpiredRecordsAreSweptByClaims: without any Sweep call, the claims of
// new keys remove expired records, so memory does not grow with keys that
// expired long ago.
func TestExpiredRecordsAreSweptByClaims(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	s := memstore.New(memstore.WithClock(clock.Now))
	claimN(t, s, "old", 4096, time.Minute)
	clock.Advance(2 * time.Minute)
	claimN(t, s, "new", 4096, time.Hour)
	assert.Less(t, s.Len(), 4096+4096/4, "claims sweep expired records as they go")
}

// TestClaimsSweepEveryExpiry: a shard is not swept while nothing in it can
// have expired, and every way a record gets an expiry sooner than the
// shard's others (a claim, a Complete, a Seed; kept by a full Sweep) brings
// the claims' sweeping back once that expiry passes.
func TestClaimsSweepEveryExpiry(t *testing.T) {
	const long, short = 4096, 2048
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s *memstore.Store)
	}{
		{"claim", func(t *testing.T, s *memstore.Store) { claimN(t, s, "short", short, time.Minute) }},
		{"complete", func(t *testing.T, s *memstore.Store) {
			for i := range short {
				k, err := idem.NewKey("", "op", "short", strconv.Itoa(i))
				require.NoError(t, err)
				_, err = s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour})
				require.NoError(t, err)
				require.NoError(t, s.Complete(t.Context(), k, 1, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute))
			}
		}},
		{"seed", func(t *testing.T, s *memstore.Store) {
			for i := range short {
				k, err := idem.NewKey("", "op", "short", strconv.Itoa(i))
				require.NoError(t, err)
				out := idem.Outcome{Status: idem.StatusSucceeded}
				require.NoError(t, s.Seed(t.Context(), k, idem.Record{Status: out.Status, Token: 1, Outcome: out}, time.Minute))
			}
		}},
		{"claim, then a full sweep", func(t *testing.T, s *memstore.Store) {
			claimN(t, s, "short", short, time.Minute)
			n, err := s.Sweep(t.Context(), 0) // sees every shard whole, keeps all
			require.NoError(t, err)
			require.Zero(t, n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
			s := memstore.New(memstore.WithClock(clock.Now))
			claimN(t, s, "long", long, time.Hour)
			tc.setup(t, s)
			require.Equal(t, long+short, s.Len())
			clock.Advance(2 * time.Minute)
			claimN(t, s, "new", long, time.Hour)
			t.Logf("%d records left of %d", s.Len(), 2*long+short)
			assert.Less(t, s.Len(), 2*long+short*3/4, "claims sweep the records whose expiry passed")
			assert.GreaterOrEqual(t, s.Len(), 2*long, "records inside their TTL stay")
		})
	}
}

// TestFakeClockFarFromNew: a fake clock set after New (from the zero time
// to a date two millennia later), and one that runs from the zero time,
// both expire leases and records by their own readings.
func TestFakeClockFarFromNew(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)} {
		t.Run(start.Format(time.DateOnly), func(t *testing.T) {
			clock := &fakeClock{}
			s := memstore.New(memstore.WithClock(clock.Now))
			clock.Advance(start.Sub(time.Time{}))
			k, err := idem.NewKey("", "op", "k")
			require.NoError(t, err)
			ctx := t.Context()
			c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Second, TTL: time.Minute})
			require.NoError(t, err)
			require.True(t, c.Claimed)
			clock.Advance(500 * time.Millisecond)
			c, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 2, Lease: time.Second, TTL: time.Minute})
			require.NoError(t, err)
			require.False(t, c.Claimed, "inside the lease")
			assert.Equal(t, 500*time.Millisecond, c.Record.LeaseLeft)
			clock.Advance(time.Second)
			c, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 3, Lease: time.Second, TTL: time.Minute})
			require.NoError(t, err)
			require.True(t, c.TakenOver, "the lease lapsed")
			require.NoError(t, s.Complete(ctx, k, 3, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute))
			clock.Advance(time.Minute)
			c, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 4, Fingerprint: idem.Fingerprint{1}, Lease: time.Second, TTL: time.Minute})
			require.NoError(t, err)
			require.True(t, c.Claimed, "the record expired")
			require.False(t, c.TakenOver)
		})
	}
}

// TestSweep: Sweep deletes expired records only, at most batch at a time.
func TestSweep(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	s := memstore.New(memstore.WithClock(clock.Now))
	claimN(t, s, "short", 300, time.Minute)
	claimN(t, s, "long", 200, time.Hour)
	clock.Advance(2 * time.Minute)
	n, err := s.Sweep(t.Context(), 100)
	require.NoError(t, err)
	assert.Equal(t, 100, n, "a batch bounds one sweep")
	n, err = s.Sweep(t.Context(), 1000)
	require.NoError(t, err)
	assert.Equal(t, 200, n, "Sweep removes what is left, up to its limit")
	assert.Equal(t, 200, s.Len(), "live records stay")
	n, err = s.Sweep(t.Context(), 1000)
	require.NoError(t, err)
	assert.Zero(t, n)
	claimN(t, s, "later", 50, time.Minute)
	clock.Advance(2 * time.Minute)
	n, err = s.Sweep(t.Context(), 0)
	require.NoError(t, err)
	assert.Equal(t, 50, n, "limit 0: every expired record")
	n, err = s.Sweep(t.Context(), -1)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing expired is left")
}

// heapOfClaims claims n keys (key(i) makes the i-th) on a new store and
// returns the store and the heap its records took.
func heapOfClaims(t *testing.T, n int, key func(i int) (idem.Key, error)) (*memstore.Store, float64) {
	keys := make([]idem.Key, n)
	for i := range keys {
		k, err := key(i)
		require.NoError(t, err)
		keys[i] = k
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memstore.New()
	for _, k := range keys {
		c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour})
		require.NoError(t, err)
		require.True(t, c.Claimed)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, n, s.Len())
	return s, float64(after.HeapAlloc - before.HeapAlloc)
}

// TestMemoryPerRecord: a record without an outcome costs at most
// RecordOverhead bytes of heap, the figure WithMaxBytes counts and the
// package documentation promises.
func TestMemoryPerRecord(t *testing.T) {
	const n = 50_000
	s, heap := heapOfClaims(t, n, func(i int) (idem.Key, error) {
		return idem.NewKey("tenant", "Orders.Pay", "order-"+strconv.Itoa(i))
	})
	per := heap / n
	t.Logf("%d records: %.0f bytes each (RecordOverhead %d)", n, per, memstore.RecordOverhead)
	assert.LessOrEqual(t, per, float64(memstore.RecordOverhead), "a record costs at most RecordOverhead")
	assert.Equal(t, int64(n*memstore.RecordOverhead), s.Bytes()-memstore.NamesBytes(s))
	runtime.KeepAlive(s)
}

// TestMemoryPerName: a record whose tenant and operation no other record
// has costs at most what the store counts for it, RecordOverhead and
// NameOverhead for its interned names and for its tenant's counter, plus
// the names' lengths.
func TestMemoryPerName(t *testing.T) {
	const n = 50_000
	s, heap := heapOfClaims(t, n, func(i int) (idem.Key, error) {
		return idem.NewKey("tenant-"+strconv.Itoa(i), "Orders.Pay"+strconv.Itoa(i), "order")
	})
	t.Logf("%d records of their own names: %.0f bytes each, %.0f counted", n, heap/n, float64(s.Bytes())/n)
	assert.LessOrEqual(t, heap, float64(s.Bytes()), "the names cost at most what the store counts")
	names, tenants := memstore.Footprint(s)
	assert.Equal(t, n, names)
	assert.Equal(t, n, tenants)
	runtime.KeepAlive(s)
}

// TestMaxBytes: outcomes count against WithMaxBytes; a claim that does not
// fit is refused with ErrStoreFull, an outcome is stored even past the
// bound, and expired records make room.
func TestMaxBytes(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	const body = 10_000
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxBytes(3*(memstore.RecordOverhead+body)))
	ctx := t.Context()
	claim := func(i int) (idem.ClaimRequest, error) {
		k, err := idem.NewKey("t", "op", strconv.Itoa(i))
		require.NoError(t, err)
		r := idem.ClaimRequest{Key: k, Token: idem.Token(i + 1), Lease: time.Minute, TTL: time.Minute}
		_, err = s.Claim(ctx, r)
		return r, err
	}
	var held []idem.ClaimRequest
	for i := range 3 {
		r, err := claim(i)
		require.NoError(t, err)
		held = append(held, r)
		require.NoError(t, s.Complete(ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, body)}, time.Minute))
	}
	assert.Equal(t, int64(3*(memstore.RecordOverhead+body)), s.Bytes()-memstore.NamesBytes(s))
	_, err := claim(3)
	require.ErrorIs(t, err, idem.ErrStoreFull, "the outcomes fill the bound")
	assert.Contains(t, err.Error(), "memstore: claim ")

	require.ErrorIs(t, s.Release(ctx, held[2].Key, held[2].Token), idem.ErrLeaseLost, "a final record is not released to make room")
	clock.Advance(2 * time.Minute)
	r, err := claim(4)
	require.NoError(t, err, "expired records make room")
	assert.Equal(t, 1, s.Len())
	// An outcome is never refused: the decided call is stored past the bound.
	require.NoError(t, s.Complete(ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, 4*body)}, time.Minute),
		"an outcome larger than the whole bound is still stored")
	assert.Greater(t, s.Bytes(), int64(3*(memstore.RecordOverhead+body)))
	_, err = claim(5)
	require.ErrorIs(t, err, idem.ErrStoreFull)
	require.NoError(t, s.Complete(ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute), "repeated by its token")
	assert.Equal(t, int64(memstore.RecordOverhead+4*body), s.Bytes()-memstore.NamesBytes(s), "a repeated Complete keeps the stored outcome")
}

// TestCapacityRace: of many concurrent claims of fresh keys on a bounded
// store, exactly the bound succeed and the rest are refused.
func TestCapacityRace(t *testing.T) {
	const capacity, goroutines = 16, 64
	s := memstore.New(memstore.WithMaxRecords(capacity), memstore.WithTenantShare(0))
	var wg sync.WaitGroup
	var claimed, full atomic.Int32
	start := make(chan struct{})
	for i := range goroutines {
		wg.Go(func() {
			k, err := idem.NewKey("t", "op", strconv.Itoa(i))
			if err != nil {
				panic(err)
			}
			<-start
			c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Minute})
			switch {
			case errors.Is(err, idem.ErrStoreFull):
				full.Add(1)
			case err == nil && c.Claimed:
				claimed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int32(capacity), claimed.Load())
	assert.Equal(t, int32(goroutines-capacity), full.Load())
	assert.Equal(t, capacity, s.Len())
}

// TestOptionsValidated: a bound that is not positive is refused at
// construction, naming the option.
func TestOptionsValidated(t *testing.T) {
	assert.PanicsWithValue(t, "memstore: WithMaxRecords(0): the bound must be positive", func() { memstore.New(memstore.WithMaxRecords(0)) })
	assert.PanicsWithValue(t, "memstore: WithMaxBytes(-1): the bound must be positive", func() { memstore.New(memstore.WithMaxBytes(-1)) })
}

// benchKeys returns n distinct keys.
func benchKeys(b *testing.B, n int) []idem.Key {
	b.Helper()
	keys := make([]idem.Key, n)
	for i := range keys {
		k, err := idem.NewKey("", "Service.Place", "order-"+strconv.Itoa(i), "pay")
		require.NoError(b, err)
		keys[i] = k
	}
	return keys
}

// BenchmarkFirstCall: what a first call asks of the store, a Claim of a
// fresh key and the Complete of its outcome.
func BenchmarkFirstCall(b *testing.B) {
	keys := benchKeys(b, b.N)
	s := memstore.New()
	ctx := context.WithoutCancel(b.Context())
	body := []byte(`{"order_id":"x","customer":"c-42","amount":4250,"currency":"EUR","status":"placed"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := idem.ClaimRequest{Key: keys[i], Token: idem.Token(i + 1), Lease: 30 * time.Second, TTL: 5 * time.Minute}
		c, err := s.Claim(ctx, req)
		if err != nil || !c.Claimed {
			b.Fatal(c, err)
		}
		if err := s.Complete(ctx, req.Key, req.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: body}, req.TTL); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay: what a replay asks of the store, a Claim that finds the
// completed record.
func BenchmarkReplay(b *testing.B) {
	keys := benchKeys(b, 256)
	s := memstore.New()
	ctx := context.WithoutCancel(b.Context())
	body := []byte(`{"order_id":"x","customer":"c-42","amount":4250,"currency":"EUR","status":"placed"}`)
	for i, k := range keys {
		req := idem.ClaimRequest{Key: k, Token: idem.Token(i + 1), Lease: 30 * time.Second, TTL: 5 * time.Minute}
		_, err := s.Claim(ctx, req)
		require.NoError(b, err)
		require.NoError(b, s.Complete(ctx, k, req.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: body}, req.TTL))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := idem.ClaimRequest{Key: keys[i%len(keys)], Token: idem.Token(i + 1000), Lease: 30 * time.Second, TTL: 5 * time.Minute}
		c, err := s.Claim(ctx, req)
		if err != nil || c.Claimed || c.Record.Status != idem.StatusSucceeded {
			b.Fatal(c, err)
		}
	}
}

// BenchmarkRefusedClaim: a claim of a new key on a full store of 10,000
// live records, refused with ErrStoreFull (BenchmarkFirstCall is what an
// admitted claim and its Complete cost).
func BenchmarkRefusedClaim(b *testing.B) {
	const n = 10_000
	keys := benchKeys(b, n+1024)
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithTenantShare(0))
	ctx := context.WithoutCancel(b.Context())
	for i, k := range keys[:n] {
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: idem.Token(i + 1), Lease: 30 * time.Second, TTL: 5 * time.Minute})
		require.NoError(b, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: keys[n+i%1024], Token: 1, Lease: 30 * time.Second, TTL: 5 * time.Minute})
		if !errors.Is(err, idem.ErrStoreFull) {
			b.Fatal(err)
		}
	}
}
