package memstore_test

import (
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

func TestConformanceFakeClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return memstore.New(memstore.WithClock(clock.Now)) },
		Sleep:    clock.Advance,
	})
}

func TestConformanceRealClock(t *testing.T) {
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return memstore.New() },
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
	n, err = s.Sweep(t.Context(), 0)
	require.NoError(t, err)
	assert.Equal(t, 200, n, "batch 0 sweeps every expired record")
	assert.Equal(t, 200, s.Len(), "live records stay")
}
