package svc

import "context"

type S struct{}

//idem:key=id ttl=1h
func (s *S) NoContext(id string) (int, error) { return 0, nil }

//idem:key=id ttl=1h
func (s *S) NoError(ctx context.Context, id string) int { return 0 }

//idem:key=id ttl=1h
func (s *S) Variadic(ctx context.Context, id string, more ...string) error { return nil }

//idem:key=id ttl=1h
func (s *S) Chan(ctx context.Context, id string) (chan int, error) { return nil, nil }
