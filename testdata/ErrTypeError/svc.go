package svc

import "context"

type S struct{}

//idem:key=id ttl=1h
func (s *S) Pay(ctx context.Context, id string) (int, error) { return undefinedThing, nil }

// References to the wrapper are fine: it is generated.
var _ = NewIdempotentS
