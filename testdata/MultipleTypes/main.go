// MultipleTypes: two annotated types in one package, and a type without
// annotations (no wrapper for it).
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Orders struct{ created int }

//idem:key=ref ttl=1h
func (o *Orders) Create(ctx context.Context, ref string) (string, error) {
	o.created++
	return fmt.Sprintf("order-%d", o.created), nil
}

type Payments struct{ charged int }

//idem:key=orderID ttl=1h
func (p *Payments) Charge(ctx context.Context, orderID string, cents int) (bool, error) {
	p.charged += cents
	return true, nil
}

//idem:key=orderID ttl=1h
func (p *Payments) Refund(ctx context.Context, orderID string) (int, error) {
	refunded := p.charged
	p.charged = 0
	return refunded, nil
}

// Catalog has no annotation: idemgen leaves it alone.
type Catalog struct{}

func (Catalog) Price(string) int { return 42 }

func main() {
	ctx := context.Background()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant()) // one executor and store for both
	orders := NewIdempotentOrders(&Orders{}, ex)
	p := &Payments{}
	payments := NewIdempotentPayments(p, ex)

	for range 2 {
		id, err := orders.Create(ctx, "cart-9")
		fmt.Println("create:", id, err)
		ok, err := payments.Charge(ctx, id, Catalog{}.Price(id))
		fmt.Println("charge:", ok, err)
	}
	// The same key in another operation is another record.
	for range 2 {
		n, err := payments.Refund(ctx, "order-1")
		fmt.Println("refund:", n, err)
	}
	fmt.Println("charged now:", p.charged)
}
