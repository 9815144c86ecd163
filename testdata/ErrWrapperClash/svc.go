package svc

import "context"

type S struct{}

// IdempotentS is the user's own type, which the generated wrapper would
// redeclare.
type IdempotentS struct{}

//idem:key=id ttl=1h
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }
