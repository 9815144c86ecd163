// ErrUnexportedField: a key on an unexported field of another package says
// so (and suggests no look-alike); a key promoted through an unexported
// embedded pointer of another package is refused, since its nil check
// cannot be written.
package svc

import (
	"context"

	"github.com/idemgen/idemgen/testdata/ErrUnexportedField/dep"
)

// S is a service.
type S struct{}

//idem:key=w.secret ttl=1m
func (s *S) Secret(ctx context.Context, w *dep.WithSecret) error { return nil }

//idem:key=r.ID ttl=1m
func (s *S) Promoted(ctx context.Context, r dep.PReq) error { return nil }

//idem:key=w.Pubb ttl=1m
func (s *S) Typo(ctx context.Context, w *dep.WithSecret) error { return nil }
