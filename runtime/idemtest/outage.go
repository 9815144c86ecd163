package idemtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// StoreOutage is one store's outage for CompleteThroughOutage: a real
// server (or database file) that refuses writes with an answer of its own
// for a span of the executor's clock, and then takes them again.
type StoreOutage struct {
	// Store is the real store under test, on the server Begin and End act
	// on.
	Store idem.Store
	// Clock is the executor's clock, in auto mode (Sleep advances it at
	// once). A store with a clock of its own may read it too
	// (sqlitestore.WithClock(Clock.Now)): its leases then lapse by it. Nil:
	// a new one.
	Clock *FakeClock
	// Begin starts the outage: it switches the database read-only, demotes
	// the server, fills the disk. The method's first run calls it, so that
	// storing that run's outcome meets the outage.
	Begin func(ctx context.Context) error
	// End ends the outage. The first Complete once Span has passed on
	// Clock since Begin calls it, before the store's own Complete.
	End func(ctx context.Context) error
	// Span is how long the outage lasts by Clock; Lease is the executor's
	// lease (idem.WithLease), longer than Span, so that the outcome can
	// still be stored once the outage ends.
	Span, Lease time.Duration
	// Result returns the method's result on its run-th run (from 1). Nil:
	// "receipt-<run>". A store that refuses only the writes that need new
	// space (a full disk) needs a large one.
	Result func(run int) string
	// CheckFirst checks the store's answer to the first Complete, met by
	// the outage: that it is the server's own answer (its code, its
	// message). CompleteThroughOutage checks that it wraps
	// idem.ErrStoreOutage.
	CheckFirst func(t testing.TB, err error)
}

// CompleteThroughOutage runs one lease-mode call through idem.Do whose
// method's first run starts o's outage, so that its outcome cannot be
// stored. It checks what the rule for an outage says: the store marks the
// server's answer as one (idem.ErrStoreOutage), the executor keeps trying
// and stores no "not stored" substitute (no idem.EventOutcomeNotStored),
// the outcome is stored once the outage ends, and a retry a minute later
// by Clock (past the lease: a claim left PROCESSING would be taken over by
// a store on Clock, and refused as in progress by one on its server's)
// replays it: the method ran exactly once.
func CompleteThroughOutage(t *testing.T, o StoreOutage) {
	t.Helper()
	if o.Store == nil || o.Begin == nil || o.End == nil || o.CheckFirst == nil || o.Span <= 0 || o.Lease <= o.Span {
		t.Fatal("idemtest: StoreOutage needs Store, Begin, End, CheckFirst and 0 < Span < Lease")
	}
	if o.Clock == nil {
		o.Clock = NewFakeClock(time.Unix(1_700_000_000, 0), true)
	}
	if o.Result == nil {
		o.Result = func(run int) string { return "receipt-" + strconv.Itoa(run) }
	}
	ctx := t.Context()
	st := &outageFor{Store: o.Store, o: &o}
	var store idem.Store = st
	if r, ok := o.Store.(idem.Renewer); ok {
		store = outageRenewer{st, r} // the executor renews the claim as it would on o.Store
	}
	var mu sync.Mutex
	var events []idem.EventKind
	ex := idem.NewExecutor(store, idem.SingleTenant(), idem.WithClock(o.Clock), idem.WithLease(o.Lease),
		idem.WithObserver(func(e idem.Event) { mu.Lock(); events = append(events, e.Kind); mu.Unlock() }))
	m := &idem.Method{Op: "billing.Pay", TTL: time.Hour}
	runs := 0
	pay := func(ctx context.Context) (string, error) {
		runs++
		if runs == 1 {
			if err := st.begin(ctx); err != nil {
				return "", err
			}
		}
		return o.Result(runs), nil
	}
	do := func() (string, error) {
		var kp idem.KeyParts
		kp.String("id", "order-1")
		var h idem.Hasher
		h.String("order-1")
		return idem.Do(ctx, ex, m, &kp, &h, pay)
	}
	first := o.Result(1)
	v, err := do()
	requireNoError(t, err, "the call ran through the outage")
	assertSame(t, first, v, "the call answers its run's result")

	st.mu.Lock()
	answers := st.answers
	ended := st.ended
	st.mu.Unlock()
	requireGreaterOrEqual(t, len(answers), 2, "the first Complete met the outage, a later one did not")
	o.CheckFirst(t, answers[0])
	assertErrorIs(t, answers[0], idem.ErrStoreOutage, "the store marks the server's answer as an outage")
	assertTrue(t, ended, "the outage ended before the outcome was stored")
	assertNoError(t, answers[len(answers)-1], "stored once the outage ended")
	mu.Lock()
	assertTrue(t, hasEvent(events, idem.EventCompleted), "an EventCompleted: %v", events)
	assertFalse(t, hasEvent(events, idem.EventOutcomeNotStored), "an outage gets no substitute: %v", events)
	mu.Unlock()

	requireNoError(t, o.Clock.Sleep(ctx, time.Minute+o.Lease), "the clock sleeps past the lease")
	v, err = do()
	requireNoError(t, err, "the retry")
	assertSame(t, first, v, "the retry replays the stored outcome")
	assertFalse(t, errors.Is(err, idem.ErrOutcomeNotStored))
	assertEqual(t, 1, runs, "the method ran exactly once")
}

// assertSame is assertEqual for results that may be long: it prints their
// first 40 bytes.
func assertSame(t testing.TB, want, got, what string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %.40q (%d bytes), want %.40q (%d bytes)", what, got, len(got), want, len(want))
	}
}

func hasEvent(events []idem.EventKind, k idem.EventKind) bool {
	for _, e := range events {
		if e == k {
			return true
		}
	}
	return false
}

// outageFor is o.Store in o's outage from begin until Span has passed on
// o.Clock; it keeps every Complete's answer.
type outageFor struct {
	idem.Store
	o *StoreOutage

	mu      sync.Mutex
	until   time.Time // zero: no outage begun
	ended   bool
	answers []error
}

func (s *outageFor) begin(ctx context.Context) error {
	s.mu.Lock()
	s.until = s.o.Clock.Now().Add(s.o.Span)
	s.mu.Unlock()
	return s.o.Begin(ctx)
}

// outageRenewer is an outageFor on a store that renews leases.
type outageRenewer struct {
	*outageFor
	r idem.Renewer
}

// Renew renews through the store.
func (s outageRenewer) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	return s.r.Renew(ctx, key, token, lease)
}

// Complete ends the outage once its span has passed, then completes.
func (s *outageFor) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	if !s.until.IsZero() && !s.o.Clock.Now().Before(s.until) && !s.ended {
		s.ended = true
		if err := s.o.End(ctx); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()
	err := s.Store.Complete(ctx, key, token, out, ttl)
	s.mu.Lock()
	s.answers = append(s.answers, err)
	s.mu.Unlock()
	return err
}
