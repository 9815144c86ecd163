package svc

import "context"

type S struct{}

//idem:key=id ttl=1h
//idem:ttl=2h
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }
