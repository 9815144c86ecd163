// Package opclash pins ops that billing's committed generated file already
// declares: generated in another run (one //go:generate line per package),
// idemgen alone would not see both.
package opclash

import "context"

// Refunds refunds.
type Refunds struct{}

// Refund pins billing's qualified default op.
//
//idem:key=id ttl=1h op=example.com/vet/billing.Service.Pay // want `op "example\.com/vet/billing\.Service\.Pay" is already the op of example\.com/vet/billing\.\(\*Service\)\.Pay in billing/idem_gen\.go \(generated in another run\)`
func (r *Refunds) Refund(ctx context.Context, id string) error { return nil }
