package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// schemaStore answers every call as a SQL store on a table that was never
// migrated does.
type schemaStore struct {
	idem.Store
	claims int
}

func (s *schemaStore) Claim(_ context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.claims++
	return idem.Claim{}, fmt.Errorf("sqlstore: claim %s: %w: run Migrate: relation does not exist", req.Key.Hex(), idem.ErrStoreSchema)
}

// TestStoreUnavailable: every way a store call before the method can fail,
// in both modes, is an error that wraps idem.ErrStoreUnavailable beside the
// store's own error, names the operation, and names the key's hex ID once;
// the method does not run. What is not the store's failure (the method's
// own error, the caller's cancelled context, a key over the limits) does
// not wrap it.
func TestStoreUnavailable(t *testing.T) {
	m := idem.Method{Op: "billing.Service.Pay", TTL: time.Minute}
	full := memstore.New(memstore.WithMaxRecords(1))
	_, err := full.Claim(t.Context(), idem.ClaimRequest{Key: idem.Key{Op: "other", ID: [32]byte{1}}, Lease: time.Minute, TTL: time.Minute, Token: 1})
	require.NoError(t, err)
	cases := []struct {
		name        string
		store       func() idem.Store
		wait        time.Duration
		ctx         func(context.Context) context.Context
		fn          func(context.Context) (int, error)
		unavailable bool
		also        error // another sentinel the error wraps
		claims      int   // the store's claims, when counted (0: not)
	}{
		{name: "lease/unreachable", store: func() idem.Store { s := newFaultStore(nil); s.failClaim = 100; return s }, unavailable: true, also: errTransport},
		{name: "lease/unreachable/wait", store: func() idem.Store { s := newFaultStore(nil); s.failClaim = 100; return s }, wait: time.Second, unavailable: true, also: errTransport},
		{name: "tx/unreachable", store: func() idem.Store {
			s := &txStore{faultStore: newFaultStore(nil)}
			s.failClaim = 100
			return s
		}, unavailable: true, also: errTransport},
		{name: "lease/full", store: func() idem.Store { return full }, unavailable: true, also: idem.ErrStoreFull},
		{name: "lease/schema", store: func() idem.Store { return &schemaStore{Store: memstore.New()} }, unavailable: true, also: idem.ErrStoreSchema, claims: 1},
		{name: "method's own error", store: func() idem.Store { return memstore.New() },
			fn: func(context.Context) (int, error) { return 0, errors.New("connection refused") }},
		{name: "caller's context cancelled", store: func() idem.Store { s := newFaultStore(nil); s.failClaim = 100; return s },
			ctx: func(ctx context.Context) context.Context {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx
			}, also: context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ev eventLog
			store := c.store()
			ex := idem.NewExecutor(store, idem.SingleTenant(), idem.WithClock(newFakeClock(true)), idem.WithObserver(ev.observe))
			mm := m
			mm.Wait = c.wait
			ran := false
			fn := c.fn
			if fn == nil {
				fn = func(context.Context) (int, error) { ran = true; return 1, nil }
			}
			ctx := t.Context()
			if c.ctx != nil {
				ctx = c.ctx(ctx)
			}
			var k idem.KeyParts
			k.String("order", "A-1")
			var h idem.Hasher
			h.String("p")
			_, err := idem.Do(ctx, ex, &mm, &k, &h, fn)
			require.Error(t, err)
			if c.also != nil {
				assert.ErrorIs(t, err, c.also)
			}
			if !c.unavailable {
				assert.NotErrorIs(t, err, idem.ErrStoreUnavailable)
				return
			}
			assert.ErrorIs(t, err, idem.ErrStoreUnavailable)
			assert.False(t, ran, "the method did not run")
			evs := ev.kinds()
			require.NotEmpty(t, evs)
			last, _ := ev.find(idem.EventStoreError)
			hex := last.Key.Hex()
			msg := err.Error()
			assert.Equal(t, 1, strings.Count(msg, hex), "the key's hex once: %s", msg)
			assert.True(t, strings.HasPrefix(msg, "idem: "+m.Op+": claim"), "the operation and the call first: %s", msg)
			if c.claims > 0 {
				assert.Equal(t, c.claims, store.(*schemaStore).claims, "a missing schema is not retried")
				assert.NotContains(t, evs, idem.EventStoreRetry)
			}
		})
	}
}

// TestPayloadMismatchNamesOp: ErrPayloadMismatch's message names the
// operation, as ErrMissingKey's does, and the key's hex ID.
func TestPayloadMismatchNamesOp(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := idem.Method{Op: "billing.Service.Pay", TTL: time.Minute}
	call := func(payload string) error {
		var k idem.KeyParts
		k.String("order", "A-1")
		var h idem.Hasher
		h.String(payload)
		_, err := idem.Do(t.Context(), ex, &m, &k, &h, func(context.Context) (int, error) { return 1, nil })
		return err
	}
	require.NoError(t, call("100"))
	err := call("999")
	require.ErrorIs(t, err, idem.ErrPayloadMismatch)
	assert.Regexp(t, `^idem: billing\.Service\.Pay: key [0-9a-f]{64} reused with a different payload$`, err.Error())
}
