// Package handler uses billing: calls through the raw service bypass the
// wrapper.
package handler

import (
	"context"

	"example.com/vet/billing"
)

// Handler holds the raw service and the wrapper.
type Handler struct {
	Svc *billing.Service
	W   *billing.IdempotentService
}

// Raw calls Pay on the raw service.
func (h *Handler) Raw(ctx context.Context, o *billing.Order) {
	h.Svc.Pay(ctx, o) // want `\(\*billing\.Service\)\.Pay is annotated with //idem: and this call bypasses its wrapper: call Pay on a billing\.IdempotentService \(made by billing\.NewIdempotentService\)`
}

// Embedded calls Pay on the wrapper's embedded service.
func (h *Handler) Embedded(ctx context.Context, o *billing.Order) {
	h.W.Service.Pay(ctx, o) // want `bypasses its wrapper`
}

// Good calls the wrapper, and an unannotated method of the raw service.
func (h *Handler) Good(ctx context.Context, o *billing.Order) int64 {
	h.W.Pay(ctx, o)
	return h.Svc.Balance() + h.W.Balance()
}

// Deliberate says its raw calls are meant.
func (h *Handler) Deliberate(ctx context.Context, o *billing.Order) {
	//idemvet:raw reconciliation replays by hand
	h.Svc.Pay(ctx, o)
	h.Svc.Pay(ctx, o) //idemvet:raw
}

// Value takes the raw method as a value, and as a method expression.
func (h *Handler) Value() (func(context.Context, *billing.Order) (int64, error), any) {
	return h.Svc.Pay, (*billing.Service).Pay // want `bypasses its wrapper` `bypasses its wrapper`
}
