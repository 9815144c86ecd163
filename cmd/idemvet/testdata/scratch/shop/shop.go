package shop

import "context"

//go:generate go tool idemgen

// Service charges.
type Service struct{ runs int }

// Charge charges once per id.
//
//idem:key=id ttl=1h
func (s *Service) Charge(ctx context.Context, id string) (int, error) {
	s.runs++
	return s.runs, nil
}
