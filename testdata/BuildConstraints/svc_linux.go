package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Ship exists only on linux.
//
//idem:key=order.ID+"ship" ttl=1h
func (s *OrderService) Ship(ctx context.Context, order Order) (int, error) {
	s.runs++
	return s.runs, nil
}

func runLinux(ctx context.Context, w *IdempotentOrderService, ex *idem.Executor) {
	a, err := w.Ship(ctx, Order{ID: "o1"})
	fmt.Println("ship:", a, err)
	b, err := w.Ship(ctx, Order{ID: "o1"})
	fmt.Println("ship retry:", b, err, "replayed:", a == b)
	n := NewIdempotentNotifier(&Notifier{}, ex)
	x, err := n.Notify(ctx, "u1")
	fmt.Println("notify:", x, err)
	y, err := n.Notify(ctx, "u1")
	fmt.Println("notify retry:", y, err, "replayed:", x == y)
}
