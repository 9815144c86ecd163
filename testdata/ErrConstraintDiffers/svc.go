package svc

import "context"

type Service struct{}

// Handle is an int on linux and a string elsewhere: the key encoding of
// the wrapper differs, so one unconstrained wrapper cannot serve both.
//
//idem:key=h ttl=1h
func (s *Service) Close(ctx context.Context, h Handle) error { return nil }
