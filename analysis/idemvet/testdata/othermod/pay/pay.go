// Package pay is a service of another module, with a pinned op.
package pay

import "context"

// Service pays.
type Service struct{}

// Capture captures a payment.
//
//idem:key=id ttl=1h op=capture
func (s *Service) Capture(ctx context.Context, id string) error { return nil }
