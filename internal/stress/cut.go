package stress

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// cutStore is the path to a lease-mode store that a scenario can cut off
// (Storm.Cut, Env.CutFor): while cut, every call fails with a connection
// refused before it reaches the store (and its Recorder, so the history
// holds only calls that reached it), as a store that cannot be reached
// does. The error is a *StoreError, as the Recorder's are.
type cutStore struct {
	next  idem.Store
	until atomic.Int64 // unix nanoseconds; calls fail before it
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
