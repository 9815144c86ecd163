// Package billing is the business layer of the gateway example: a service
// that charges invoices, made idempotent by the invoice (idem_gen.go), and
// records tips, which have no business key and no wrapper.
package billing

//go:generate go tool idemgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrAmount says that the amount is not positive (final: stored and
// replayed).
var ErrAmount = errors.New("billing: the amount must be positive")

// ChargeRequest is Charge's payload.
type ChargeRequest struct {
	InvoiceID string `json:"invoice_id"`
	Amount    int64  `json:"amount"`
}

// Charge is a charge made.
type Charge struct {
	ID        string `json:"id"`
	InvoiceID string `json:"invoice_id"`
	Amount    int64  `json:"amount"`
}

// Service charges invoices and records tips, in memory. Every call of
// Charge or Tip on the Service itself charges again: it is not idempotent.
//
//idem:defaults ttl=24h inflight=wait:5s
type Service struct {
	mu      sync.Mutex
	charges []Charge
	tips    int
}

// Charge charges an invoice: one charge per invoice, whichever client or
// Idempotency-Key asks (the business key); the invoice charged again with
// another amount is refused (idem.ErrPayloadMismatch).
//
//idem:key=req.InvoiceID final=ErrAmount
func (s *Service) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	if req.Amount <= 0 {
		return Charge{}, ErrAmount
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Charge{ID: fmt.Sprintf("ch_%d", len(s.charges)+1), InvoiceID: req.InvoiceID, Amount: req.Amount}
	s.charges = append(s.charges, c)
	return c, nil
}

// Tip records a tip: there is no business key that tells a retry from a
// second tip, so it has no annotation; only the edge's key protects it.
func (s *Service) Tip(ctx context.Context, amount int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tips++
	return s.tips, nil
}

// Charges returns how many charges were made.
func (s *Service) Charges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.charges)
}

// Tips returns how many tips were recorded.
func (s *Service) Tips() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tips
}
