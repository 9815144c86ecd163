package main

import "context"

// Handle is an int on linux and a string elsewhere, so Close is declared
// once per configuration, and each gets its own wrapper (the way out of
// ErrConstraintDiffers).
type Handle int

func newHandle() Handle { return 7 }

//idem:key=h ttl=1h
func (s *OrderService) Close(ctx context.Context, h Handle) (int, error) {
	s.runs++
	return s.runs, nil
}
