// Package badann has mistakes in its annotations.
package badann

import "context"

// Svc does.
type Svc struct{}

// Do has a key that names no parameter.
//
//idem:key=nope ttl=1h // want `key: nope is not a parameter of Svc\.Do \(parameters: ctx, id\)`
func (s *Svc) Do(ctx context.Context, id string) error { return nil }

// Again has a bad retries.
//
//idem:key=id retries=x // want `malformed retries=x: want a whole number like 3`
func (s *Svc) Again(ctx context.Context, id string) error { return nil }

// idem:key=id // want `"// idem:" is not an annotation: write //idem: with no space after // and a colon after idem`
func (s *Svc) Typo(ctx context.Context, id string) error { return nil }
