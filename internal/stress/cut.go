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
// (Storm.Cut, Env.CutAfterNextEffect): while cut, every call fails with a connection
// refused before it reaches the store (and its Recorder, so the history
// holds only calls that reached it), as a store that cannot be reached
// does. The error is a *StoreError, as the Recorder's are.
type cutStore struct {
	next  idem.Store
	until atomic.Int64 // unix nanoseconds; calls fail before it

	mu      sync.Mutex
	armed   time.Duration // the next effect cuts the store off for this long
	started chan struct{} // closed when it does
}

// arm makes the next call of effect cut the store off for d.
func (c *cutStore) arm(d time.Duration, started chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.started = d, started
}

// effect is called after each side effect of Pay (Ledger.After): an armed
// cut starts now, between the method's side effect and its Complete.
func (c *cutStore) effect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == 0 {
		return
	}
	c.until.Store(time.Now().Add(c.armed).UnixNano())
	c.armed = 0
	close(c.started)
}

func (c *cutStore) cut(op string) error {
	if time.Now().UnixNano() < c.until.Load() {
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
