package svc

import "context"

type Order struct{ ID string }

type S struct{}

//idem:key=order.ID2+op ttl=1h
func (s *S) Pay(ctx context.Context, order *Order, op string) (int, error) { return 0, nil }

//idem:key=ordr.ID ttl=1h
func (s *S) Refund(ctx context.Context, order *Order) (int, error) { return 0, nil }
