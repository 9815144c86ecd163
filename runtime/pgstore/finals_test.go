package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// hintStore is a store of TestHintNeverChangesAnswer: a *pgstore.Store or
// a *pgstore.TxStore, with the hint's test hook.
type hintStore interface {
	idem.Store
	idem.AdminStore
	Sweep(ctx context.Context, limit int) (int, error)
	Hinted(idem.Key) bool
}

// TestHintNeverChangesAnswer: a store's finals hint (a key it saw final is
// read first with a plain SELECT) picks a claim's plan, never its answer.
// For every way a hinted key's record can stop being live and final, or
// change, behind the store's back (another process, an operator, the
// clock, the sweeper), the hinted claim answers what a claim of a store
// that never saw the key answers, for a twin key taken through the same
// steps; and the hint is gone once it was wrong.
func TestHintNeverChangesAnswer(t *testing.T) {
	type env struct {
		t     *testing.T
		other hintStore // another process on the table
		req   idem.ClaimRequest
	}
	held := func(e env) func() {
		// Another process claims the key again (after a forget) and holds it.
		c, h := claimFor(e.t, e.other, claimReq(e.req.Key, "payload", time.Minute, time.Hour), 0)
		require.True(e.t, c.Claimed)
		return func() { require.NoError(e.t, releaseHeld(e.t, h)) }
	}
	forget := func(e env) {
		require.NoError(e.t, e.other.Forget(e.t.Context(), idem.ForgetRequest{
			Key: e.req.Key, Token: e.req.Token, Status: idem.StatusSucceeded, By: "test"}))
	}
	const shortTTL = 50 * time.Millisecond
	expire := func(env) { time.Sleep(3 * shortTTL) } // only ever longer than the TTL
	cases := []struct {
		name    string
		ttl     time.Duration // of the stored outcome
		payload string        // of the claim asked after the steps
		between func(env) (undo func())
		stays   bool // the hint is right, and stays
	}{
		{name: "unchanged", stays: true},
		{name: "other payload", payload: "other", stays: true},
		{name: "expired", ttl: shortTTL, between: func(e env) func() { expire(e); return nil }},
		{name: "expired and swept", ttl: shortTTL, between: func(e env) func() {
			expire(e)
			_, err := e.other.Sweep(e.t.Context(), 100)
			require.NoError(e.t, err)
			return nil
		}},
		{name: "forgotten", between: func(e env) func() { forget(e); return nil }},
		{name: "forgotten and held elsewhere", between: func(e env) func() { forget(e); return held(e) }},
		{name: "forgotten and completed elsewhere", stays: true, between: func(e env) func() {
			forget(e)
			_, h := claimFor(e.t, e.other, claimReq(e.req.Key, "payload", time.Minute, time.Hour), 0)
			h.complete(e.t, "another outcome")
			return nil
		}},
	}
	pool := newPool(t, 8, nil)
	modes := []struct {
		name string
		mk   func(table string) hintStore
	}{
		{"lease", func(table string) hintStore { return pgstore.New(pool, pgstore.WithTable(table)) }},
		{"tx", func(table string) hintStore { return pgstore.NewTx(pool, pgstore.WithTable(table)) }},
	}
	for _, m := range modes {
		for _, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				table := newTable(t, pool)
				hinted, other := m.mk(table), m.mk(table)
				ttl := tc.ttl
				if ttl == 0 {
					ttl = time.Hour
				}
				payload := tc.payload
				if payload == "" {
					payload = "payload"
				}
				// The hinted key is completed by the store asked later;
				// its twin by another process, so the asked store has no
				// hint of it.
				type twin struct {
					k    idem.Key
					by   hintStore
					req  idem.ClaimRequest
					undo func()
				}
				twins := []*twin{{k: key(t, "t", "hinted-"+randHex(4)), by: hinted}, {k: key(t, "t", "cold-"+randHex(4)), by: other}}
				for _, tw := range twins {
					tw.req = claimReq(tw.k, "payload", time.Minute, time.Hour)
					c, h := claimFor(t, tw.by, tw.req, 0)
					require.True(t, c.Claimed)
					completeTTL(t, h, "first outcome", ttl)
				}
				require.True(t, hinted.Hinted(twins[0].k), "the store that stored the outcome hints its key")
				require.False(t, hinted.Hinted(twins[1].k))
				for _, tw := range twins {
					if tc.between != nil {
						tw.undo = tc.between(env{t: t, other: other, req: tw.req})
					}
				}
				var answers [2]idem.Claim
				for i, tw := range twins {
					c, h := claimFor(t, hinted, claimReq(tw.k, payload, time.Minute, time.Hour), 0)
					answers[i] = c
					if c.Claimed {
						require.NoError(t, releaseHeld(t, h))
					}
					if tw.undo != nil {
						tw.undo()
					}
				}
				assert.Equal(t, normalize(answers[1]), normalize(answers[0]), "the hinted claim answers as a cold one")
				assert.Equal(t, tc.stays, hinted.Hinted(twins[0].k), "the hint after the claim")
			})
		}
	}
}

// completeTTL stores a success of body, to expire after ttl.
func completeTTL(t *testing.T, h *held, body string, ttl time.Duration) {
	t.Helper()
	if h.txn != nil {
		require.NoError(t, h.txn.Complete(t.Context(), succeeded(body), ttl, false))
		return
	}
	require.NoError(t, h.store.Complete(t.Context(), h.req.Key, h.req.Token, succeeded(body), ttl))
}

// releaseHeld releases what h claimed.
func releaseHeld(t *testing.T, h *held) error {
	if h.txn != nil {
		return h.txn.Release(t.Context())
	}
	return h.store.Release(t.Context(), h.req.Key, h.req.Token)
}

// normalize keeps what a claim's answer means, without what differs
// between two keys taken through the same steps (tokens, leases left).
func normalize(c idem.Claim) idem.Claim {
	c.Record.Token = 0
	c.Record.LeaseLeft = 0
	if c.Record.Outcome.Body == nil {
		c.Record.Outcome.Body = []byte{}
	}
	return c
}
