package memstore_test

import (
	"sync"
	"testing"
	"time"

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
