// Package inject wires billing's service into an interface: the raw value
// bypasses the wrapper, which implements the interface too.
package inject

import (
	"context"

	"example.com/vet/billing"
)

// Payer is what API needs of billing: its annotated Pay.
type Payer interface {
	Pay(ctx context.Context, o *billing.Order) (int64, error)
}

// Balancer needs only billing's unannotated Balance.
type Balancer interface{ Balance() int64 }

// API calls a Payer.
type API struct{ P Payer }

// New returns an API over p.
func New(p Payer) *API { return &API{P: p} }

// NewAll returns APIs over ps.
func NewAll(ps ...Payer) []*API { return nil }

// Wire shows every way a raw service becomes a Payer.
func Wire(raw *billing.Service, w *billing.IdempotentService) {
	_ = New(raw)       // want `a raw \*billing\.Service used as Payer bypasses the wrapper of its annotated Pay: every call through the interface runs without idempotency; pass a billing\.IdempotentService \(made by billing\.NewIdempotentService\), which implements it too, or mark a deliberate raw use with //idemvet:raw`
	_ = NewAll(w, raw) // want `a raw \*billing\.Service used as Payer`
	var p Payer = raw  // want `a raw \*billing\.Service used as Payer`
	p = raw            // want `a raw \*billing\.Service used as Payer`
	_ = API{P: raw}    // want `a raw \*billing\.Service used as Payer`
	_ = &API{raw}      // want `a raw \*billing\.Service used as Payer`

	// The wrapper, an interface without an annotated method, and a
	// deliberate raw use: nothing to say.
	_ = New(w)
	p = w
	var b Balancer = raw
	_ = New(raw) //idemvet:raw a reconciliation job replays by hand
	_, _ = p, b
}
