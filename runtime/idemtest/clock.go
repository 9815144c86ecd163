package idemtest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// FakeClock is an idem.Clock in virtual time, for tests of code that runs
// on an Executor (idem.WithClock): leases, waits and backoff then follow the
// test's Advance, not the machine's speed. In auto mode Sleep advances the
// clock by its duration and returns at once; otherwise Sleep blocks until
// Advance moves the clock past its end, or its context is done. It is safe
// for concurrent use.
type FakeClock struct {
	mu       sync.Mutex
	now      time.Time
	auto     bool
	sleepers map[*sleeper]struct{}
	changed  chan struct{} // closed and replaced when the set of sleepers changes
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

// NewFakeClock returns a FakeClock that reads start until it is advanced;
// auto chooses the mode (see FakeClock).
func NewFakeClock(start time.Time, auto bool) *FakeClock {
	return &FakeClock{now: start, auto: auto, sleepers: map[*sleeper]struct{}{}, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep waits for d on the clock (see FakeClock), or until ctx is done and
// then returns ctx.Err().
func (c *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if c.auto || d <= 0 {
		c.now = c.now.Add(max(d, 0))
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

// notify wakes WaitSleepers; c.mu is held.
func (c *FakeClock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves the clock by d and wakes the sleepers whose time has come.
func (c *FakeClock) Advance(d time.Duration) {
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

// WaitSleepers blocks until n goroutines sleep on the clock, so that a test
// advances it only once what it waits for is waiting. Its real-time bound
// (30 s) only turns a hang into a failure; it plays no part in what passes.
func (c *FakeClock) WaitSleepers(t testing.TB, n int) {
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

// Sleepers returns how many goroutines sleep on the clock now.
func (c *FakeClock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}
