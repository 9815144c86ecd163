package idemtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A store that cannot be used: its server is down (Options.Down), or its
// schema was never migrated (Options.Unmigrated). Through idem.Do, the
// caller must be able to tell that from an error of its own method.

// doStoreDown: the server is down.
func (s *suite) doStoreDown(t testing.TB) {
	if s.Down == nil {
		t.Skip("Options.Down is nil: the store has no server that can be down")
	}
	s.doUnusable(t, s.Down(testingT(t)), false)
}

// doStoreUnmigrated: the schema was never migrated.
func (s *suite) doStoreUnmigrated(t testing.TB) {
	if s.Unmigrated == nil {
		t.Skip("Options.Unmigrated is nil: the store has no schema")
	}
	s.doUnusable(t, s.Unmigrated(testingT(t)), true)
}

// doUnusable calls a method through idem.Do on store, which cannot be used:
// the method must not run, and the error must wrap idem.ErrStoreUnavailable
// beside the store's own error, name the operation, and name the key's hex
// ID exactly once. With schema, it must also wrap idem.ErrStoreSchema, name
// the call that fixes it (Migrate), and not be retried.
func (s *suite) doUnusable(t testing.TB, store idem.Store, schema bool) {
	tenant := "idemtest-unusable"
	// The executor may emit from a goroutine of its own (a release it sends
	// again in the background) while the case reads the events.
	var (
		mu     sync.Mutex
		events []idem.Event
	)
	observe := func(ev idem.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	ex := idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return tenant }),
		idem.WithLease(s.Unit), idem.WithObserver(observe))
	m := testMethod
	for _, wait := range []bool{false, true} {
		mu.Lock()
		events = nil
		mu.Unlock()
		m.Wait = 0
		if wait {
			m.Wait = s.Unit // a duplicate's wait claims again: the same error
		}
		ran := false
		_, err := charge(t.Context(), ex, &m, "order-unusable", "100", func(context.Context) (string, error) {
			ran = true
			return "ran", nil
		})
		requireError(t, err, "a store that cannot be used is an error")
		t.Logf("wait=%v: %v", wait, err)
		assertFalse(t, ran, "the method must not run without a claim")
		assertErrorIs(t, err, idem.ErrStoreUnavailable, "the caller can tell the store's failure from its method's: %v", err)
		mu.Lock()
		got := append([]idem.Event(nil), events...)
		mu.Unlock()
		requireTrue(t, len(got) > 0, "the observer is told")
		hex := got[0].Key.Hex()
		msg := err.Error()
		assertEqual(t, 1, strings.Count(msg, hex), "the message names the key's hex ID exactly once: %s", msg)
		assertContains(t, msg, m.Op, "the message names the operation")
		assertContains(t, msg, "claim", "the message names the store call")
		last := got[len(got)-1]
		assertEqual(t, idem.EventStoreError, last.Kind, "the observer is told of a store error")
		if !schema {
			continue
		}
		assertErrorIs(t, err, idem.ErrStoreSchema, "a missing schema is named as such: %v", err)
		assertContains(t, msg, "Migrate", "the message names the call that migrates the schema")
		for _, ev := range got {
			assertTrue(t, ev.Kind != idem.EventStoreRetry, "a missing schema is not retried: %v", ev.Err)
		}
	}
}
