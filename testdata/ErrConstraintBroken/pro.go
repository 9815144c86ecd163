//go:build pro

package svc

import "context"

// The only configuration that compiles Upgrade does not build: its errors
// are reported (with the configuration), not skipped.
//
//idem:key=id ttl=1h
func (s *Service) Upgrade(ctx context.Context, id string) error { return nope }
