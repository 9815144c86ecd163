// Package stalebroken has a request type changed since idem_gen.go was
// generated: the generated file no longer compiles (its staleness guard),
// and idemvet still says so and offers the rewrite.
package stalebroken

import "context"

// Refund is a refund request.
type Refund struct {
	ID     string
	Amount int64
	Reason string
}

// Payments refunds.
type Payments struct{}

// Refund refunds once per ID.
//
//idem:key=r.ID ttl=1h // want `idem_gen\.go is stale: idemgen would write it differently`
func (p *Payments) Refund(ctx context.Context, r Refund) (string, error) { return r.ID, nil }
