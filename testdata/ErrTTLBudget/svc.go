package svc

import "context"

type S struct{}

//idem:key=id ttl=50s
//idem:retries=2 timeout=2s backoff=500ms downstream=120s margin=30s
func (s *S) Refund(ctx context.Context, id string) (int, error) { return 0, nil }

//idem:key=id ttl=1m lease=5m
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }
