// BuildConstraints: annotated methods under build constraints. Pay is in
// every build; Ship only on linux (svc_linux.go, a file-name suffix); the
// whole Notifier type only on linux (notifier.go, a //go:build line);
// Upgrade only with the pro tag (pro.go); Close once per configuration
// (handle_linux.go, handle_other.go). Each constraint gets its own generated
// file carrying it, and the wrapper type is in every build.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Order struct{ ID string }

type OrderService struct{ runs int }

//idem:key=order.ID ttl=1h
func (s *OrderService) Pay(ctx context.Context, order Order) (int, error) {
	s.runs++
	return s.runs, nil
}

// Refund is not annotated: the wrapper promotes it in every build.
func (s *OrderService) Refund(order Order) string { return "refunded " + order.ID }

func main() {
	ctx := context.Background()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	w := NewIdempotentOrderService(&OrderService{}, ex)
	a, err := w.Pay(ctx, Order{ID: "o1"})
	fmt.Println("pay:", a, err)
	b, err := w.Pay(ctx, Order{ID: "o1"})
	fmt.Println("pay retry:", b, err, "replayed:", a == b)
	fmt.Println(w.Refund(Order{ID: "o1"}))
	_, err = w.Pay(ctx, Order{})
	fmt.Println("empty key:", errors.Is(err, idem.ErrMissingKey))
	c1, err := w.Close(ctx, newHandle())
	fmt.Println("close:", c1, err)
	c2, err := w.Close(ctx, newHandle())
	fmt.Println("close retry:", c2, err, "replayed:", c1 == c2)
	runLinux(ctx, w, ex)
	runPro(ctx, w)
}
