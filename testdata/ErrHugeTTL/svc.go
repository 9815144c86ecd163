// ErrHugeTTL: a duration too large for time.Duration says it exceeds the
// maximum, rather than calling it malformed.
package svc

import "context"

// S is a service.
type S struct{}

//idem:key=id ttl=200000d
func (s *S) Pay(ctx context.Context, id string) error { return nil }
