package idem

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkLookupNone is what a call that uses none of the runtime's
// context values (tenant, decisions, CallInfo, transaction) pays for them:
// one walk of a request's context (cancellable, carrying two values) that
// finds nothing.
func BenchmarkLookupNone(b *testing.B) {
	type k1 struct{}
	type k2 struct{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = context.WithValue(context.WithValue(ctx, k1{}, 1), k2{}, 2)
	b.ReportAllocs()
	for b.Loop() {
		if s := lookup(ctx, fTenant|fDecisions|fInfo); s.found != 0 {
			b.Fatal("found a value")
		}
	}
}

// stringKeyedCtx answers Value for string keys only, from keys, as gin's
// *gin.Context does without ContextWithFallback; with fallback, it asks
// its Context for the other keys, as gin's does with it.
type stringKeyedCtx struct {
	context.Context
	keys     map[string]any
	fallback bool
}

func (c stringKeyedCtx) Value(key any) any {
	if s, ok := key.(string); ok {
		return c.keys[s]
	}
	if c.fallback {
		return c.Context.Value(key)
	}
	return nil
}

type (
	testTxn      struct{ Txn }
	testObserver struct{ CallObserver }
	foreignKey   struct{}
)

// TestLookupMatchesNearestValue: for random chains of every context the
// runtime derives, a foreign value, cancellation, and door contexts held by
// a framework context (with and without fallback), one lookup finds each
// field where the nearest context that sets it put it, as a ctx.Value per
// field would: the tenant, the Decisions cell (or its hiding by a method
// context), the CallInfo (or its hiding by a method context), the method
// context's key, the open transaction and the observer. The public
// readers (TenantFromContext, OpenTxn, KeyFrom) agree.
func TestLookupMatchesNearestValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 1))
	for range 3000 {
		ctx := context.Background()
		var want callState
		type step struct {
			f     fields
			apply func(*callState)
		}
		var steps []step // outermost first
		n := rng.IntN(10)
		for range n {
			switch rng.IntN(11) {
			case 0:
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			case 1:
				ctx = context.WithValue(ctx, foreignKey{}, rng.Int())
			case 2:
				tn := []string{"", "acme", "globex"}[rng.IntN(3)]
				ctx = ContextWithTenant(ctx, tn)
				steps = append(steps, step{fTenant, func(s *callState) { s.tenant = tn }})
			case 3:
				d := &Decisions{}
				ctx = WithDecisions(ctx, d)
				steps = append(steps, step{fDecisions, func(s *callState) { s.decisions = d }})
			case 4:
				ctx = methodContext(ctx, &Decisions{})
				steps = append(steps, step{fDecisions, func(s *callState) { s.decisions = nil }})
			case 5:
				var info *CallInfo
				ctx, info = WithCallInfo(ctx)
				steps = append(steps, step{fInfo, func(s *callState) { s.info = info }})
			case 6:
				k := Key{ID: [32]byte{byte(rng.IntN(256)), 1}}
				ctx = ContextWithKey(ctx, k)
				kc := ctx.(*keyContext)
				steps = append(steps, step{fInfo | fKey, func(s *callState) {
					if s.found&fInfo == 0 {
						s.info = nil
					}
					if s.found&fKey == 0 {
						s.key = kc
					}
				}})
			case 7:
				txn := &testTxn{}
				ctx = withOpenTxn(ctx, txn)
				steps = append(steps, step{fTxn, func(s *callState) { s.txn = txn }})
			case 8:
				obs := &testObserver{}
				ctx = withField(ctx, fObserver, "", obs)
				steps = append(steps, step{fObserver, func(s *callState) { s.observer = obs }})
			case 9, 10:
				// A framework context holding ctx as the door's: the
				// values are ctx's.
				ctx = stringKeyedCtx{Context: context.Background(), keys: map[string]any{DoorContextKey: ctx}, fallback: rng.IntN(2) == 0}
			}
		}
		for i := len(steps) - 1; i >= 0; i-- { // nearest first
			s := steps[i]
			if s.f == fInfo|fKey || want.found&s.f == 0 { // a method context decides each of its two itself
				s.apply(&want)
			}
			want.found |= s.f
		}
		all := fTenant | fDecisions | fInfo | fKey | fTxn | fObserver
		got := lookup(ctx, all)
		if got != want {
			t.Fatalf("chain of %d: lookup = %+v, want %+v", n, got, want)
		}
		for f := fTenant; f <= fObserver; f <<= 1 {
			one := lookup(ctx, f)
			if one.found&f != want.found&f {
				t.Fatalf("lookup of field %b alone: found %b, want %b", f, one.found, want.found)
			}
		}
		tn, ok := TenantFromContext(ctx)
		if tn != want.tenant || ok != (want.found&fTenant != 0) {
			t.Fatalf("TenantFromContext = %q, %v; want %q, %v", tn, ok, want.tenant, want.found&fTenant != 0)
		}
		if OpenTxn(ctx) != want.txn {
			t.Fatal("OpenTxn differs")
		}
		k, ok := KeyFrom(ctx)
		if ok != (want.key != nil) || ok && k != hex.EncodeToString(want.key.id[:]) {
			t.Fatalf("KeyFrom = %q, %v", k, ok)
		}
	}
}

// TestDetachedKeyContext: the context of the store calls after the method
// ran, made in the method context's allocation, is context.WithoutCancel
// of the caller's: never done, no deadline, no error, no cause, even when
// the caller's context ended with a cause and a deadline; the caller's
// values, and not the method's key (as before).
func TestDetachedKeyContext(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), foreignKey{}, "v"))
	parent, cancelT := context.WithTimeout(parent, time.Hour)
	defer cancelT()
	kc := ContextWithKey(parent, Key{ID: [32]byte{1}}).(*keyContext)
	d := kc.detached()
	want := context.WithoutCancel(parent)
	cancel(errors.New("the client went away"))
	if parent.Err() == nil || context.Cause(parent) == nil {
		t.Fatal("the caller's context is not cancelled")
	}
	for _, c := range []context.Context{d, want} {
		if _, ok := c.Deadline(); ok || c.Done() != nil || c.Err() != nil || context.Cause(c) != nil {
			t.Errorf("%v: a deadline, Done, Err or Cause (%v) of the caller's", c, context.Cause(c))
		}
		if c.Value(foreignKey{}) != "v" {
			t.Errorf("%v: the caller's value is lost", c)
		}
		if _, ok := KeyFrom(c); ok {
			t.Errorf("%v: carries the method's key", c)
		}
	}
	child, cancelChild := context.WithCancel(d)
	defer cancelChild()
	if child.Err() != nil {
		t.Error("a context derived from it is cancelled with the caller's")
	}
}

// TestInstant: with the system clock, instant is a reading of the
// monotonic clock that orders and subtracts with time.Now's both ways;
// with another clock, it is that clock's Now.
func TestInstant(t *testing.T) {
	ex := NewExecutor(nopStore{}, SingleTenant())
	if !ex.system {
		t.Fatal("the default clock is not SystemClock")
	}
	for range 1000 {
		before := time.Now()
		i := ex.instant()
		after := time.Now()
		if i.Before(before) || i.After(after) || i.Sub(before) < 0 || after.Sub(i) < 0 {
			t.Fatalf("instant %v outside [%v, %v]", i, before, after)
		}
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fixed := NewExecutor(nopStore{}, SingleTenant(), WithClock(fixedClock{at}))
	if fixed.system || !fixed.instant().Equal(at) {
		t.Fatalf("another clock's instant: %v", fixed.instant())
	}
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                                 { return c.t }
func (fixedClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// nopStore is a Store that is never called.
type nopStore struct{ Store }
