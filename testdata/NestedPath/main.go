// NestedPath: a key path through pointer fields and an embedded struct; a
// nil pointer on the way is idem.ErrMissingKey, never a panic.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Account struct{ ID string }

type Customer struct {
	Name    string
	Account *Account
}

type Meta struct{ RequestID string }

type Request struct {
	Meta     // embedded: Request.RequestID is promoted
	Customer *Customer
}

type Billing struct{ runs int }

//idem:key=req.Customer.Account.ID+req.RequestID ttl=30m
func (b *Billing) Invoice(ctx context.Context, req *Request) (int, error) {
	b.runs++
	return b.runs, nil
}

func main() {
	ctx := context.Background()
	b := &Billing{}
	w := NewIdempotentBilling(b, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	full := &Request{Meta: Meta{RequestID: "r1"}, Customer: &Customer{Name: "Ann", Account: &Account{ID: "acc-7"}}}
	for range 2 {
		n, err := w.Invoice(ctx, full)
		fmt.Println("invoice:", n, err)
	}
	for _, req := range []*Request{
		nil,
		{Meta: Meta{RequestID: "r2"}},
		{Meta: Meta{RequestID: "r3"}, Customer: &Customer{Name: "Bob"}},
		{Meta: Meta{RequestID: "r4"}, Customer: &Customer{Account: &Account{}}},
		{Customer: &Customer{Account: &Account{ID: "acc-8"}}},
	} {
		_, err := w.Invoice(ctx, req)
		fmt.Println("missing:", errors.Is(err, idem.ErrMissingKey), err)
	}
	fmt.Println("runs:", b.runs)
}
