package bad

import "context"

// Svc does.
type Svc struct{}

// Do does.
//
//idem:key=nope ttl=1h
func (s *Svc) Do(ctx context.Context, id string) error { return nil }
