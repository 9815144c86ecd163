package tiered

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TxStore is a tiered store whose durable store holds each claim in a
// database transaction together with the method's own writes (pgstore.NewTx):
// it is an idem.TxStore, so the executor runs the claim, the method and the
// outcome as that one transaction, committed once, and the fast store is
// used as by Store. TxStore is also an idem.Store (Claim, Complete, Release
// and Renew go to the durable store's own, as with Store), for callers that
// do not run the method in the transaction. See the package documentation,
// section Two modes.
type TxStore struct {
	*Store
	durableTx idem.TxStore
}

// NewTx returns a TxStore with fast in front of durable, a store in
// transactional mode. The options are New's.
func NewTx(fast idem.Store, durable idem.TxStore, opts ...Option) *TxStore {
	return &TxStore{Store: New(fast, durable, opts...), durableTx: durable}
}

// ClaimTx implements idem.TxStore: a final outcome in the fast store is
// returned from there; everything else is decided by the durable store's
// ClaimTx, whose transaction the returned Txn owns when the key is claimed.
func (s *TxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	fc, fastErr, err := s.fastClaim(ctx, req)
	if err != nil || fastErr == nil && !fc.Claimed && final(fc.Record.Status) {
		return fc, nil, err
	}
	dc, dtx, err := s.durableTx.ClaimTx(ctx, req, wait)
	if err == nil && dc.Claimed {
		if dtx == nil {
			return idem.Claim{}, nil, errorf("claim", req.Key, fmt.Errorf("%w: the durable store claimed the key without a transaction", ErrDurable))
		}
		return dc, &txn{s: s.Store, durable: dtx, key: req.Key, token: req.Token}, nil
	}
	c, err := s.settle(ctx, req, fc, fastErr, dc, err)
	return c, nil, err
}

// txn is a claim held in the durable store's transaction.
type txn struct {
	s       *Store
	durable idem.Txn
	key     idem.Key
	token   idem.Token
}

// Context implements idem.Txn: the durable transaction's context.
func (t *txn) Context(ctx context.Context) context.Context { return t.durable.Context(ctx) }

// Complete implements idem.Txn: the durable store commits the outcome (its
// error is the answer), then the fast store stores it under the claim's
// token, best effort. When the commit fails, nothing was committed, so the
// fast store's PROCESSING record of the claim is deleted, best effort.
func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if err := t.durable.Complete(ctx, out, ttl, discardWrites); err != nil {
		t.s.fastRelease(ctx, t.key, t.token)
		return t.s.durableErr("complete", t.key, err)
	}
	t.s.fastComplete(ctx, t.key, t.token, out, ttl)
	return nil
}

// Release implements idem.Txn: the durable transaction is rolled back (its
// error is the answer), and the fast store's PROCESSING record of the claim
// deleted, best effort.
func (t *txn) Release(ctx context.Context) error {
	err := t.durable.Release(ctx)
	t.s.fastRelease(ctx, t.key, t.token)
	if err != nil {
		return t.s.durableErr("release", t.key, err)
	}
	return nil
}
