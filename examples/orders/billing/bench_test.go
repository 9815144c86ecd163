package billing

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type okGateway struct{}

func (okGateway) Authorize(context.Context, *Order) error { return nil }

// BenchmarkPay compares, in one run, a direct call of Service.Pay (the floor),
// a first call through the generated wrapper on memstore (claim, run,
// encode, complete) and a replay (claim finds the outcome, decode).
func BenchmarkPay(b *testing.B) {
	ctx := context.Background()
	newSvc := func() *Service {
		return &Service{Ledger: NewMemLedger(map[string]int64{"alice": 1 << 62}), Gateway: okGateway{}}
	}
	orders := make([]*Order, 1<<16)
	for i := range orders {
		orders[i] = &Order{ID: "A-" + strconv.Itoa(i), Customer: "alice", Amount: 1}
	}
	b.Run("direct", func(b *testing.B) {
		svc := newSvc()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := svc.Pay(ctx, orders[i%len(orders)], "pay"); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("wrapped-first", func(b *testing.B) {
		svc := NewIdempotentService(newSvc(), idem.NewExecutor(memstore.New(), idem.SingleTenant()))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%len(orders) == 0 { // a fresh store: every call is a first call
				svc = NewIdempotentService(newSvc(), idem.NewExecutor(memstore.New(), idem.SingleTenant()))
			}
			if _, err := svc.Pay(ctx, orders[i%len(orders)], "pay"); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("wrapped-replay", func(b *testing.B) {
		svc := NewIdempotentService(newSvc(), idem.NewExecutor(memstore.New(), idem.SingleTenant()))
		if _, err := svc.Pay(ctx, orders[0], "pay"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := svc.Pay(ctx, orders[0], "pay"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
