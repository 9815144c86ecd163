package svc

import "context"

type S struct{}

//idem:final=ErrX
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }

var ErrX error
