package svc

import "context"

type S struct{}

//idem:key=id tll=155s
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }
