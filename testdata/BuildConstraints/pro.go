//go:build pro

package main

import (
	"context"
	"fmt"
)

// Upgrade exists only with the pro tag.
//
//idem:key=order.ID+"upgrade" ttl=1h
func (s *OrderService) Upgrade(ctx context.Context, order Order) (int, error) {
	s.runs++
	return s.runs, nil
}

func runPro(ctx context.Context, w *IdempotentOrderService) {
	a, err := w.Upgrade(ctx, Order{ID: "o1"})
	fmt.Println("upgrade:", a, err)
	b, err := w.Upgrade(ctx, Order{ID: "o1"})
	fmt.Println("upgrade retry:", b, err, "replayed:", a == b)
}
