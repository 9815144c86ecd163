package stress

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// cutStore is the path to a lease-mode store that a scenario can cut off
// (Storm.Cut, Env.CutAtNextComplete, Env.CutAfterNextEffect): while cut,
// every call fails before it reaches the store (and its Recorder, so the
// history holds only calls that reached it), with a connection refused, as
// a store that cannot be reached does, or with the answer the scenario
// chose (Storm.CutAnswer: a store that answers with an error that can pass,
// such as a read-only database). The error is a *StoreError, as the
// Recorder's are.
type cutStore struct {
	next   idem.Store
	answer error        // what a cut call fails with; nil: a connection refused
	until  atomic.Int64 // unix nanoseconds; calls fail before it

	mu         sync.Mutex
	armed      time.Duration // the next effect (or Complete) cuts the store off for this long
	atComplete bool          // armed for a Complete, not the next effect
	nth        int64         // with atComplete: the run's nth Complete (or the next, once past)
	completes  int64         // Complete calls so far
	started    chan struct{} // closed when it does
	cutFor     time.Duration // the armed cut's length, once started
}

// arm makes the next side effect of Pay, or with atComplete the run's nth
// Complete (the next one when there were n already; n <= 0: the next),
// cut the store off for d.
func (c *cutStore) arm(d time.Duration, atComplete bool, n int64, started chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.atComplete, c.nth, c.started = d, atComplete, n, started
}

// effect is called after each side effect of Pay (Ledger.After): an armed
// cut starts now, between the method's side effect and its Complete.
func (c *cutStore) effect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == 0 || c.atComplete {
		return
	}
	c.start()
}

// start starts the armed cut; c.mu is held.
func (c *cutStore) start() {
	c.until.Store(time.Now().Add(c.armed).UnixNano())
	c.cutFor, c.armed = c.armed, 0
	close(c.started)
}

func (c *cutStore) cut(op string) error {
	if op == "complete" {
		c.mu.Lock()
		c.completes++
		if c.armed != 0 && c.atComplete && c.completes >= c.nth {
			c.start() // this Complete meets the outage: it fails below
		}
		c.mu.Unlock()
	}
	if time.Now().UnixNano() < c.until.Load() {
		if c.answer != nil {
			return &StoreError{Op: op, Err: c.answer}
		}
		return &StoreError{Op: op, Err: fmt.Errorf("stress: store cut off: %w", syscall.ECONNREFUSED)}
	}
	return nil
}

// Claim implements idem.Store.
func (c *cutStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := c.cut("claim"); err != nil {
		return idem.Claim{}, err
	}
	return c.next.Claim(ctx, req)
}

// Complete implements idem.Store.
func (c *cutStore) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := c.cut("complete"); err != nil {
		return err
	}
	return c.next.Complete(ctx, key, token, out, ttl)
}

// Release implements idem.Store.
func (c *cutStore) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	if err := c.cut("release"); err != nil {
		return err
	}
	return c.next.Release(ctx, key, token)
}
