package svc

import "context"

type A struct{}

//idem:key=id ttl=1h op=charge
func (a *A) Pay(ctx context.Context, id string) (int, error) { return 0, nil }

type B struct{}

//idem:key=id ttl=1h op=charge
func (b *B) Charge(ctx context.Context, id string) (int, error) { return 0, nil }
