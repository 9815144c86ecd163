// Package opdep depends on a package of another module that pins the op
// it pins too: found through the dependency's Ops fact.
package opdep

import (
	"context"

	"example.com/othermod/pay"
)

// Shipping ships.
type Shipping struct{ P *pay.IdempotentService }

// Capture captures a shipment.
//
//idem:key=id ttl=1h op=capture // want `op "capture" is also the op of example\.com/othermod/pay\.\(\*Service\)\.Capture \(package example\.com/othermod/pay, a dependency\)`
func (s *Shipping) Capture(ctx context.Context, id string) error { return nil }
