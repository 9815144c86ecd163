// Package missing has an annotation and no idem_gen.go.
package missing

import "context"

// Svc does.
type Svc struct{}

// Do does once per id.
//
//idem:key=id ttl=1h // want `idem_gen\.go is missing: idemgen would write the wrappers of this package there`
func (s *Svc) Do(ctx context.Context, id string) error { return nil }
