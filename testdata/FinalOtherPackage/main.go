// FinalOtherPackage: final= names sentinels of another package; the
// generated file imports it (and only it, besides the runtime).
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/testdata/FinalOtherPackage/payments"
)

type Checkout struct{ attempts int }

//idem:key=cartID ttl=1h final=payments.ErrDeclined|payments.ErrFraud
func (c *Checkout) Pay(ctx context.Context, cartID string, card payments.Card, cents int) (string, error) {
	c.attempts++
	if cents > card.Limit {
		return "", payments.ErrDeclined
	}
	return "paid " + cartID, nil
}

func main() {
	ctx := context.Background()
	c := &Checkout{}
	w := NewIdempotentCheckout(c, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	card := payments.Card{Number: "4242", Limit: 100}
	for range 2 {
		_, err := w.Pay(ctx, "cart-1", card, 500)
		fmt.Println("cart-1:", err, errors.Is(err, payments.ErrDeclined))
	}
	for range 2 {
		out, err := w.Pay(ctx, "cart-2", card, 50)
		fmt.Println("cart-2:", out, err)
	}
	fmt.Println("attempts:", c.attempts)
}
