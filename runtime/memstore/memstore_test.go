package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
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
			return memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxRecords(n))
		},
		Sweep: sweep,
		Sleep: clock.Advance,
	})
}

func TestConformanceRealClock(t *testing.T) {
	idemtest.Run(t, idemtest.Options{
		NewStore:   func(*testing.T) idem.Store { return memstore.New() },
		NewBounded: func(_ *testing.T, n int) idem.Store { return memstore.New(memstore.WithMaxRecords(n)) },
		Sweep:      sweep,
	})
}

// The byte bound, as idemtest checks the record bound: a bound of a few
// records' worth of bytes refuses the next claim, and outcomes are stored
// even past it.
func TestConformanceByteBound(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return memstore.New(memstore.WithClock(clock.Now)) },
		NewBounded: func(_ *testing.T, n int) idem.Store {
			// n fresh records fit, the (n+1)th does not.
			return memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxBytes(int64(n+1)*memstore.RecordOverhead-1))
		},
		Sweep: sweep,
		Sleep: clock.Advance,
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
	for _, limit := range []int{0, -1} {
		_, err = s.Sweep(t.Context(), limit)
		assert.Error(t, err, "a limit of %d is a mistake", limit)
	}
}

// TestMemoryPerRecord: a record without an outcome costs at most
// RecordOverhead bytes of heap, the figure WithMaxBytes counts and the
// package documentation promises.
func TestMemoryPerRecord(t *testing.T) {
	const n = 50_000
	keys := make([]idem.Key, n)
	for i := range keys {
		k, err := idem.NewKey("tenant", "Orders.Pay", "order-"+strconv.Itoa(i))
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
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d records: %.0f bytes each (RecordOverhead %d)", n, per, memstore.RecordOverhead)
	assert.LessOrEqual(t, per, float64(memstore.RecordOverhead), "a record costs at most RecordOverhead")
	assert.Equal(t, n, s.Len())
	assert.Equal(t, int64(n*memstore.RecordOverhead), s.Bytes())
	runtime.KeepAlive(s)
}
