// Hygiene: parameters named like what the wrapper refers to (predeclared
// identifiers, a type of the signature, the descriptor variable, the
// runtime's and the standard packages' import names) are renamed in the
// wrapper, which still has the same methods.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Order is a request.
type Order struct{ ID string }

// Receipt is a result.
type Receipt struct{ N int }

// Svc counts its calls.
type Svc struct{ calls int }

// Pay has parameters named string, error, int64, nil, Order (its own type),
// idemSvcPay (the descriptor), idem, time and context.
//
//idem:key=Order.ID+string+int64 ttl=1m
func (s *Svc) Pay(context context.Context, Order *Order, string string, int64 int64, error error, nil []byte, idemSvcPay bool, idem int, time time.Duration) (*Receipt, error) {
	s.calls++
	return &Receipt{N: s.calls}, error
}

// Len has a parameter named like a builtin and one like the receiver.
//
//idem:key=len+w hash=len ttl=1m
func (s *Svc) Len(ctx context.Context, len string, w uint8) error {
	s.calls++
	return nil
}

func main() {
	ctx := context.Background()
	s := &Svc{}
	w := NewIdempotentSvc(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for range 2 {
		r, err := w.Pay(ctx, &Order{ID: "o1"}, "s", 7, nil, []byte("x"), true, 1, time.Second)
		fmt.Println(r.N, err)
	}
	_, err := w.Pay(ctx, &Order{ID: "o1"}, "s", 7, nil, []byte("other"), true, 1, time.Second)
	fmt.Println("other payload:", errors.Is(err, idem.ErrPayloadMismatch))
	_, err = w.Pay(ctx, nil, "s", 7, nil, nil, true, 1, time.Second)
	fmt.Println("nil order:", errors.Is(err, idem.ErrMissingKey))
	fmt.Println(w.Len(ctx, "l", 1), w.Len(ctx, "l", 1))
	fmt.Println("calls:", s.calls)
}
