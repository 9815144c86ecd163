// Package wiring builds executors and wrappers, some of which cannot work.
package wiring

import (
	"context"
	"time"

	"example.com/vet/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func tenant(ctx context.Context) string { return "t" }

// Build builds them.
func Build() {
	store := memstore.New()
	_ = idem.NewExecutor(store)                              // want `idem\.NewExecutor without idem\.WithTenant or idem\.SingleTenant panics`
	_ = idem.NewExecutor(store, idem.WithLease(time.Second)) // want `without idem\.WithTenant`
	_ = idem.NewExecutor(store, idem.SingleTenant())
	_ = idem.NewExecutor(store, idem.SingleTenant(), idem.WithTenant(tenant)) // want `more than one tenancy option`
	opts := []idem.Option{idem.SingleTenant()}
	_ = idem.NewExecutor(store, opts...)
	opt := idem.SingleTenant()
	_ = idem.NewExecutor(store, opt)
	_ = idem.NewExecutor(nil, idem.SingleTenant()) // want `nil store panics`
	_ = idem.WithTenant(nil)                       // want `idem\.WithTenant\(nil\) makes idem\.NewExecutor panic`
	ex := idem.NewExecutor(store, idem.WithTenant(tenant))
	_ = billing.NewIdempotentService(&billing.Service{}, nil)   // want `NewIdempotentService with a nil executor`
	_ = billing.NewIdempotentService(nil, ex)                   // want `NewIdempotentService of a nil Service`
	_ = &billing.IdempotentService{Service: &billing.Service{}} // want `a billing\.IdempotentService literal has no executor`
	_ = billing.NewIdempotentService(&billing.Service{}, ex)
}
