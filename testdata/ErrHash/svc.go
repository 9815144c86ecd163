package svc

import "context"

type S struct{}

//idem:key=id ttl=1h hash=id,amont,ctx
func (s *S) Pay(ctx context.Context, id string, amount int) (int, error) { return 0, nil }

//idem:key=id ttl=1h
func (s *S) Watch(ctx context.Context, id string, done chan struct{}) (int, error) { return 0, nil }
