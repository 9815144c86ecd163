//go:build !linux

package main

import "context"

type Handle string

func newHandle() Handle { return "h7" }

//idem:key=h ttl=1h
func (s *OrderService) Close(ctx context.Context, h Handle) (int, error) {
	s.runs++
	return s.runs, nil
}
