package idemtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The trace link of a replay (docs/decisions/replay-links.md): the
// executor keeps the original call's trace origin in the outcome's Meta,
// and hands it back to the call's idem.OriginObserver when a replay is
// answered from the record. Whether the link reaches the replay depends
// on the store keeping Meta byte for byte through the executor's paths
// (lease and transactional completes, a final error, a claim that
// answers the record), so every store checks it here; runtime/idemotel
// checks that an OriginObserver's Replaying becomes a span link.

// originHook is a CallHook whose calls keep origin and record what the
// replays are told (an idem.OriginObserver, as idemotel's observer is).
type originHook struct {
	origin idem.TraceOrigin
	mu     sync.Mutex
	seen   []idem.CallMeta // what Replaying was told, in order
	errs   []error
}

func (h *originHook) StartCall(ctx context.Context, _ *idem.Method, _ time.Time) (context.Context, idem.CallObserver) {
	return ctx, originObserver{h}
}

func (h *originHook) replays() ([]idem.CallMeta, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]idem.CallMeta(nil), h.seen...), append([]error(nil), h.errs...)
}

type originObserver struct{ h *originHook }

func (originObserver) Event(idem.Event) {}
func (originObserver) Method(ctx context.Context, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, func(time.Time, error) {}
}
func (originObserver) StoreOp(ctx context.Context, _ string, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, func(time.Time, error) {}
}
func (originObserver) Wait(time.Time, time.Duration) {}
func (originObserver) End(time.Time, error)          {}
func (o originObserver) Origin() idem.TraceOrigin    { return o.h.origin }
func (o originObserver) Replaying(meta idem.CallMeta, err error) {
	o.h.mu.Lock()
	o.h.seen = append(o.h.seen, meta)
	o.h.errs = append(o.h.errs, err)
	o.h.mu.Unlock()
}

var _ idem.OriginObserver = originObserver{}

func (s *suite) originExecutor(e *env, store idem.Store, h *originHook) *idem.Executor {
	return idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return e.tenant }),
		idem.WithLease(s.Unit), idem.WithCallHook(h))
}

// doReplayKeepsOrigin: a replay is told the origin of the call that ran,
// for a result and for a final error, by the executor that ran it and by
// another (a restart, or another process), and, when the store's backend
// is shared by the stores NewStore returns (a database, a server), by a
// store that never saw the key (a retry that reaches another instance);
// a record written by a call without an OriginObserver replays with none.
func (s *suite) doReplayKeepsOrigin(t testing.TB) {
	e := s.env(t)
	m := &idem.Method{Op: "idemtest.Origin", TTL: 20 * s.Unit, Final: []idem.FinalError{{Name: "ErrDeclined", Err: errDeclined}}}
	runs := 0
	paid := func(context.Context) (string, error) { runs++; return "paid", nil }
	declined := func(context.Context) (string, error) { runs++; return "", errDeclined }
	origin := idem.TraceOrigin{
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Flags:   1,
	}
	for _, c := range []struct {
		id    string
		fn    func(context.Context) (string, error)
		final bool
	}{{"origin-result", paid, false}, {"origin-final", declined, true}} {
		ran := &originHook{origin: origin}
		check := func(what string, got string, err error) {
			t.Helper()
			if c.final {
				assertErrorIs(t, err, errDeclined, "%s %s", c.id, what)
			} else {
				assertNoError(t, err, "%s %s", c.id, what)
				assertEqual(t, "paid", got, "%s %s", c.id, what)
			}
		}
		got, err := charge(e.ctx, s.originExecutor(e, e.store, ran), m, c.id, "p", c.fn)
		check("first call", got, err)
		seen, _ := ran.replays()
		assertEqual(t, 0, len(seen), "%s: the call that ran is no replay", c.id)

		// The same executor, and another executor on the same store.
		same := ran
		got, err = charge(e.ctx, s.originExecutor(e, e.store, same), m, c.id, "p", c.fn)
		check("replay", got, err)
		other := &originHook{}
		got, err = charge(e.ctx, s.originExecutor(e, e.store, other), m, c.id, "p", c.fn)
		check("replay by another executor", got, err)
		for _, h := range []*originHook{same, other} {
			seen, errs := h.replays()
			if requireEqualLen(t, 1, len(seen), "%s: one replay", c.id) {
				assertEqual(t, origin, seen[0].Origin, "%s: the replay is told the original call's origin", c.id)
				assertNoError(t, errs[0], "%s: the record's Meta reads", c.id)
			}
		}

		// A store that never saw the key (a retry that reaches another
		// instance): when the stores NewStore returns share a backend,
		// the key replays there, cold; on a store of its own (memstore)
		// the method runs again and there is no replay to check.
		cold := &originHook{}
		got, err = charge(e.ctx, s.originExecutor(e, s.NewStore(testingT(t)), cold), m, c.id, "p", c.fn)
		if runs == 1 {
			check("cold replay", got, err)
			seen, errs := cold.replays()
			if requireEqualLen(t, 1, len(seen), "%s: one cold replay", c.id) {
				assertEqual(t, origin, seen[0].Origin, "%s: a cold replay is told the original call's origin", c.id)
				assertNoError(t, errs[0], "%s: the record's Meta reads", c.id)
			}
		}
		runs = 0
	}

	// Written without an OriginObserver: no origin, and no error.
	_, err := charge(e.ctx, s.executor(e), m, "origin-none", "p", paid)
	requireNoError(t, err)
	none := &originHook{}
	_, err = charge(e.ctx, s.originExecutor(e, e.store, none), m, "origin-none", "p", paid)
	requireNoError(t, err)
	seen, errs := none.replays()
	if requireEqualLen(t, 1, len(seen), "one replay of a record without an origin") {
		assertTrue(t, !seen[0].Origin.IsValid(), "a record written without an OriginObserver keeps no origin")
		assertNoError(t, errs[0])
	}
}

// requireEqualLen reports whether got is want, failing t (without
// stopping it) when it is not.
func requireEqualLen(t testing.TB, want, got int, msgAndArgs ...any) bool {
	t.Helper()
	return assertEqual(t, want, got, msgAndArgs...)
}
