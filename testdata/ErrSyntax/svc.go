// ErrSyntax: a syntax error in the package is reported once, at its
// position, without follow-on errors.
package svc

import "context"

type S struct{}

//idem:key=id ttl=1m
func (s *S) Pay(ctx context.Context, id string) error {
	return nil
}

func (s *S) Broken() {
	x := 
}

var _ = NewIdempotentS
