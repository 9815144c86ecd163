package svc

import "context"

type Req struct {
	Tags   map[string]string
	Amount float64
}

type S struct{}

//idem:key=req.Tags+req.Amount ttl=1h
func (s *S) Pay(ctx context.Context, req Req) (int, error) { return 0, nil }
