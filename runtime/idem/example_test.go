package idem_test

import (
	"context"
	"errors"
	"fmt"
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
	ex := idem.NewExecutor(memstore.New())
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
	ex := idem.NewExecutor(memstore.New())
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
	}))
	pay := func() (string, error) { return "ok", nil }
	_, _ = charge(context.Background(), ex, "order-3", 1, pay)
	_, _ = charge(context.Background(), ex, "order-3", 1, pay)
	// Output:
	// claimed Payments.Charge order-3
	// completed Payments.Charge order-3
	// replayed Payments.Charge order-3
}
