//go:build linux && windows

package svc

import "context"

// No build is both linux and windows: the annotation could never be
// generated, so it is refused instead of ignored.
//
//idem:key=id ttl=1h
func (s *Service) Pay(ctx context.Context, id string) error { return nil }
