package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestNotStorable: a method that returns NotStorable(reason) ran once; its
// caller gets the reason (final, and matching ErrOutcomeNotStored), the
// observer EventOutcomeNotStored, every retry ErrOutcomeNotStored without a
// second run, and in transactional mode its writes are committed.
func TestNotStorable(t *testing.T) {
	reason := errors.New("response larger than the door stores")
	for _, tc := range []struct {
		name string
		st   func() (idem.Store, func() []string)
	}{
		{"lease mode", func() (idem.Store, func() []string) { return newFaultStore(nil), nil }},
		{"transactional", func() (idem.Store, func() []string) {
			s := &txStore{faultStore: newFaultStore(nil)}
			return s, func() []string { s.mu.Lock(); defer s.mu.Unlock(); return append([]string(nil), s.writes...) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, writes := tc.st()
			var notStored atomic.Int64
			ex := idem.NewExecutor(st, idem.SingleTenant(), idem.WithObserver(func(ev idem.Event) {
				if ev.Kind == idem.EventOutcomeNotStored && errors.Is(ev.Err, reason) {
					notStored.Add(1)
				}
			}))
			m := &idem.Method{Op: "notstorable", TTL: time.Hour}
			var runs atomic.Int64
			call := func() (string, error) {
				var parts idem.KeyParts
				parts.String("k", "1")
				var h idem.Hasher
				return idem.Do(context.Background(), ex, m, &parts, &h, func(ctx context.Context) (string, error) {
					runs.Add(1)
					if writes != nil {
						write(ctx, "effect")
					}
					return "big", idem.NotStorable(reason)
				})
			}
			_, err := call()
			if !errors.Is(err, reason) || !errors.Is(err, idem.ErrFinal) || !errors.Is(err, idem.ErrOutcomeNotStored) {
				t.Fatalf("first call: %v; want the reason, final, matching ErrOutcomeNotStored", err)
			}
			for range 2 {
				if _, err := call(); !errors.Is(err, idem.ErrOutcomeNotStored) || errors.Is(err, reason) {
					t.Fatalf("retry: %v; want ErrOutcomeNotStored (the replay), not a run", err)
				}
			}
			if runs.Load() != 1 || notStored.Load() != 1 {
				t.Fatalf("%d runs, %d EventOutcomeNotStored; want 1 and 1", runs.Load(), notStored.Load())
			}
			if writes != nil {
				if w := writes(); len(w) != 1 {
					t.Fatalf("committed writes %v; want the method's one write", w)
				}
			}
		})
	}
}
