// Package payments is one of two packages with the same type and method
// names, the most common in Go services ((*Service).Capture), annotated
// with the same key: internal/opnames checks that their wrappers on one
// executor keep apart (issue 20.1).
package payments

import "context"

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

// Service counts its runs.
type Service struct{ Runs int }

// Capture captures an order for payments.
//
//idem:key=orderID ttl=1h
func (s *Service) Capture(ctx context.Context, orderID string) (string, error) {
	s.Runs++
	return "payments captured " + orderID, nil
}
