// ErrShadowedBuiltin: a package-level declaration of a predeclared type
// name would change what the generated code's bool, string or error mean:
// refused at the declaration.
package svc

import "context"

// bool is the package's own.
type bool int

// S is a service.
type S struct{}

//idem:key=id ttl=1m
func (s *S) Pay(ctx context.Context, id int) error { return nil }

// any is an alias of the predeclared any's type: accepted.
type any = interface{}
