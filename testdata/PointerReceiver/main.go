// PointerReceiver: a struct type with a pointer-receiver method, keyed by a
// field behind a pointer and the operation name.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Order struct {
	ID     string
	Amount int
}

type Receipt struct {
	OrderID string
	Charged int
	Charge  int // how many charges the service had made when it ran
}

type OrderService struct{ charges int }

//idem:key=order.ID+op ttl=155s
func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error) {
	s.charges++
	return &Receipt{OrderID: order.ID, Charged: order.Amount, Charge: s.charges}, nil
}

// Refund is not annotated: the wrapper promotes it unchanged.
func (s *OrderService) Refund(order *Order) int { return order.Amount }

func main() {
	ctx := context.Background()
	svc := &OrderService{}
	w := NewIdempotentOrderService(svc, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	r, err := w.Pay(ctx, &Order{ID: "o1", Amount: 5}, "pay")
	fmt.Printf("first:    %+v %v\n", *r, err)
	r, err = w.Pay(ctx, &Order{ID: "o1", Amount: 5}, "pay")
	fmt.Printf("retry:    %+v %v\n", *r, err)
	_, err = w.Pay(ctx, &Order{ID: "o1", Amount: 6}, "pay")
	fmt.Println("changed amount is a conflict:", errors.Is(err, idem.ErrPayloadMismatch))
	r, err = w.Pay(ctx, &Order{ID: "o2", Amount: 6}, "pay")
	fmt.Printf("new key:  %+v %v\n", *r, err)
	_, err = w.Pay(ctx, nil, "pay")
	fmt.Println("nil order:", errors.Is(err, idem.ErrMissingKey), err)
	_, err = w.Pay(ctx, &Order{}, "pay")
	fmt.Println("empty ID:", errors.Is(err, idem.ErrMissingKey), err)
	fmt.Println("promoted Refund:", w.Refund(&Order{Amount: 3}))
	fmt.Println("charges:", svc.charges)
}
