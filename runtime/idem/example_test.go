package idem_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var errDeclined = errors.New("card declined")

// chargeMethod is what idemgen emits for
//
//	//idem:key=orderID ttl=24h final=errDeclined
var chargeMethod = idem.Method{
	Op:    "Payments.Charge",
	TTL:   24 * time.Hour,
	Final: []idem.FinalError{{Name: "errDeclined", Err: errDeclined}},
}

// charge is a hand-written idempotent call, in the shape of generated code.
func charge(ctx context.Context, ex *idem.Executor, orderID string, cents int64, pay func() (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("orderID", orderID)
	var h idem.Hasher
	h.String(orderID)
	h.Int(cents)
	return idem.Do(ctx, ex, &chargeMethod, &k, &h, func(context.Context) (string, error) { return pay() })
}

// Do runs a call at most once per key; a retry gets the stored result.
func ExampleDo() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	ctx := context.Background()
	charges := 0
	pay := func() (string, error) { charges++; return fmt.Sprintf("receipt-%d", charges), nil }

	first, _ := charge(ctx, ex, "order-1", 4200, pay)
	retry, _ := charge(ctx, ex, "order-1", 4200, pay)
	_, err := charge(ctx, ex, "order-1", 9900, pay)
	fmt.Println(first, retry, charges)
	fmt.Println(errors.Is(err, idem.ErrPayloadMismatch))
	// Output:
	// receipt-1 receipt-1 1
	// true
}

// A final error is stored and replayed; errors.Is still matches the sentinel.
func ExampleDo_finalError() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	ctx := context.Background()
	decline := func() (string, error) { return "", fmt.Errorf("charge order-2: %w", errDeclined) }
	_, err1 := charge(ctx, ex, "order-2", 100, decline)
	_, err2 := charge(ctx, ex, "order-2", 100, func() (string, error) { return "never", nil })
	fmt.Println(err2, errors.Is(err2, errDeclined), err1.Error() == err2.Error())
	// Output:
	// charge order-2: card declined true true
}

// Derive gives each downstream call a key of its own that is the same on
// every retry of the parent.
func ExampleDerive() {
	parent := "8e03978e-40d5-43e8-bc93-6894a57f9324"
	first := idem.Derive(parent, "charge")
	onRetry := idem.Derive(parent, "charge")
	ship := idem.Derive(parent, "ship")
	fmt.Println(first == onRetry)
	fmt.Println(first == ship)
	// Output:
	// true
	// false
}

// An observer sees every claim, replay, conflict and release.
func ExampleWithObserver() {
	ex := idem.NewExecutor(memstore.New(), idem.WithObserver(func(ev idem.Event) {
		fmt.Println(ev.Kind, ev.Key.Op, ev.Key.Text)
	}), idem.SingleTenant())
	pay := func() (string, error) { return "ok", nil }
	_, _ = charge(context.Background(), ex, "order-3", 1, pay)
	_, _ = charge(context.Background(), ex, "order-3", 1, pay)
	// Output:
	// claimed Payments.Charge order-3
	// completed Payments.Charge order-3
	// replayed Payments.Charge order-3
}

// A result the store cannot keep (here a NaN, which JSON cannot carry) goes
// to the first caller; retries get ErrOutcomeNotStored instead of running
// the method a second time.
func ExampleErrOutcomeNotStored() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "Probes.Read", TTL: time.Hour}
	reads := 0
	read := func(ctx context.Context) (float64, error) {
		var k idem.KeyParts
		k.String("probe", "probe-1")
		var h idem.Hasher
		h.String("probe-1")
		return idem.Do(ctx, ex, m, &k, &h, func(context.Context) (float64, error) { reads++; return math.NaN(), nil })
	}
	v, err := read(context.Background())
	fmt.Println(v, err)
	_, err = read(context.Background())
	fmt.Println(errors.Is(err, idem.ErrOutcomeNotStored), reads)
	// Output:
	// NaN <nil>
	// true 1
}

// An invalid option is a mistake in the program: NewExecutor panics and
// names it.
func ExampleNewExecutor_invalidOption() {
	defer func() { fmt.Println(recover()) }()
	idem.NewExecutor(memstore.New(), idem.WithLease(0), idem.SingleTenant())
	// Output: idem: WithLease(0s): lease must be > 0
}

// Method.Scheme names how the wrapper computed a fingerprint. A retry whose
// wrapper was regenerated with another scheme (a deploy between the first
// call and the retry) is replayed; with the same scheme, another
// fingerprint is another payload.
func ExampleMethod_scheme() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	pay := func(scheme uint32, fingerprint string) (string, error) {
		m := &idem.Method{Op: "Payments.Charge", TTL: time.Hour, Scheme: scheme}
		var k idem.KeyParts
		k.String("orderID", "order-9")
		var h idem.Hasher
		h.String(fingerprint)
		return idem.Do(context.Background(), ex, m, &k, &h, func(context.Context) (string, error) { return "receipt-9", nil })
	}
	first, _ := pay(1, "old encoding")
	retry, err := pay(2, "new encoding")
	fmt.Println(first, retry, err)
	_, err = pay(1, "another payload")
	fmt.Println(errors.Is(err, idem.ErrPayloadMismatch))
	// Output:
	// receipt-9 receipt-9 <nil>
	// true
}

// WithCallInfo tells the caller whether its result was replayed, so that
// what must happen once per result (a confirmation email, a revenue
// counter) happens on the first run only.
func ExampleWithCallInfo() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	pay := func() (string, error) { return "receipt-1", nil }
	for attempt := 1; attempt <= 2; attempt++ {
		ctx, info := idem.WithCallInfo(context.Background())
		receipt, err := charge(ctx, ex, "order-7", 4200, pay)
		if err != nil {
			fmt.Println(err)
			return
		}
		if !info.Replayed() {
			fmt.Println("attempt", attempt, "email the customer:", receipt)
		} else {
			fmt.Println("attempt", attempt, "replayed", receipt+": no second email")
		}
	}
	// Output:
	// attempt 1 email the customer: receipt-1
	// attempt 2 replayed receipt-1: no second email
}

// A store that cannot be used is told apart from the method's own failure
// by idem.ErrStoreUnavailable: the method did not run.
func ExampleErrStoreUnavailable() {
	ex := idem.NewExecutor(downStore{}, idem.SingleTenant())
	_, err := charge(context.Background(), ex, "order-8", 4200, func() (string, error) { return "never", nil })
	fmt.Println(errors.Is(err, idem.ErrStoreUnavailable))
	// Output: true
}

// downStore is a store whose server is down.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
}

func (downStore) Release(context.Context, idem.Key, idem.Token) error {
	return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
}

// Generated code checks, when its package is initialized, that the types of
// a method's hashed parameters have the layout it was generated for; a
// stale wrapper's calls are then refused with ErrStaleWrapper. (The layout
// hash here is deliberately not the one of string: the wrapper is stale.)
func ExampleCheckLayout() {
	err := idem.CheckLayout("Orders.Pay", 0x1, idem.HashedParam[string](false))
	fmt.Println(errors.Is(err, idem.ErrStaleWrapper))
	// Output: true
}

// A caller whose context ends while the store cannot be reached after the
// method ran gets an *idem.OutcomePendingError: the call ran, and the
// executor goes on storing its outcome while the claim can be live. It
// matches ErrInProgress, so a door answers it as a duplicate in flight: a
// retry after RetryAfter gets the stored outcome, never a second run
// (unless the outage outlasts the lease: lease mode's limit).
func ExampleOutcomePendingError() {
	handle := func(err error) string {
		var pending *idem.OutcomePendingError
		switch {
		case errors.As(err, &pending):
			return fmt.Sprintf("ran, not stored yet: retry after %v", pending.RetryAfter)
		case errors.Is(err, idem.ErrInProgress):
			return "running: retry later"
		}
		return "other"
	}
	err := error(&idem.OutcomePendingError{RetryAfter: 12 * time.Second, Cause: context.Canceled})
	fmt.Println(handle(err))
	fmt.Println(errors.Is(err, idem.ErrOutcomePending), errors.Is(err, idem.ErrInProgress), errors.Is(err, context.Canceled))
	// Output:
	// ran, not stored yet: retry after 12s
	// true true false
}

// ErrStoreBusy (a store's connections all in use) also matches ErrStoreFull,
// for callers written before it: test it first to tell the two apart.
func ExampleErrStoreBusy() {
	err := fmt.Errorf("pgstore: claim 00ff: pool exhausted: %w", idem.ErrStoreBusy)
	switch {
	case errors.Is(err, idem.ErrStoreBusy):
		fmt.Println("busy: retry shortly")
	case errors.Is(err, idem.ErrStoreFull):
		fmt.Println("full: retry later")
	}
	fmt.Println(errors.Is(err, idem.ErrStoreFull))
	// Output:
	// busy: retry shortly
	// true
}

// Method.Func names the wrapped method. Two methods under one operation
// name would answer each other's calls with their stored outcomes, so an
// executor refuses a second Func under an op it has run, before anything
// is claimed; op= in the annotation gives one of them its own name.
func ExampleMethod_func() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	capture := func(m *idem.Method) (string, error) {
		var k idem.KeyParts
		k.String("orderID", "ord-42")
		var h idem.Hasher
		h.String("ord-42")
		return idem.Do(context.Background(), ex, m, &k, &h, func(context.Context) (string, error) { return "captured by " + m.Func, nil })
	}
	payments := &idem.Method{Op: "Service.Capture", Func: "example.com/shop/payments.(*Service).Capture", TTL: time.Hour}
	shipping := &idem.Method{Op: "Service.Capture", Func: "example.com/shop/shipping.(*Service).Capture", TTL: time.Hour}
	fmt.Println(capture(payments))
	_, err := capture(shipping)
	fmt.Println(errors.Is(err, idem.ErrMisconfigured))
	shipping.Op = "example.com/shop/shipping.Service.Capture"
	fmt.Println(capture(shipping))
	// Output:
	// captured by example.com/shop/payments.(*Service).Capture <nil>
	// true
	// captured by example.com/shop/shipping.(*Service).Capture <nil>
}
