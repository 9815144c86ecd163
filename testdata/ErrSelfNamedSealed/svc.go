// ErrSelfNamedSealed: an interface with a method named like itself must be
// held in a field and its other methods passed through, which is impossible
// for a method unexported in another package: refused at the type.
package svc

import (
	"context"

	"github.com/idemgen/idemgen/testdata/ErrSelfNamedSealed/dep"
)

// Store stores.
type Store interface {
	dep.Sealed
	// Store saves.
	//
	//idem:key=id ttl=1m
	Store(ctx context.Context, id string) error
}
