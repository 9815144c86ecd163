package idemgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is an idem.Clock whose time moves only by Advance; sleepers wake
// when it passes their time. It starts at the wall clock's now, so that the
// deadlines grpc-go sets (by the wall clock) and the clock agree.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers map[*sleeper]struct{}
	changed  chan struct{}
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now(), sleepers: map[*sleeper]struct{}{}, changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if d <= 0 {
		c.mu.Unlock()
		return ctx.Err()
	}
	s := &sleeper{until: c.now.Add(d), wake: make(chan struct{})}
	c.sleepers[s] = struct{}{}
	c.notify()
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		if _, ok := c.sleepers[s]; ok {
			delete(c.sleepers, s)
			c.notify()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

func (c *fakeClock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves the clock by d and wakes the sleepers whose time has come.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for s := range c.sleepers {
		if !s.until.After(c.now) {
			delete(c.sleepers, s)
			close(s.wake)
		}
	}
	c.notify()
}

// waitSleepers blocks until n goroutines sleep on the clock. The real-time
// bound only turns a hang into a failure; it plays no part in what passes.
func (c *fakeClock) waitSleepers(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		got, ch := len(c.sleepers), c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%d goroutines sleep on the clock, want %d", got, n)
		}
	}
}
