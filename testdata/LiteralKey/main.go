// LiteralKey: string literals between key parts, and the parts' encoding
// keeps "a"+"bc" apart from "ab"+"c".
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type RefundRequest struct {
	CustomerID string
	RefundNo   string
	Cents      int
}

type Refunds struct{ n int }

//idem:key=req.CustomerID+"refund"+req.RefundNo ttl=72h
func (r *Refunds) Refund(ctx context.Context, req RefundRequest) (string, error) {
	r.n++
	return fmt.Sprintf("refund #%d for %s/%s", r.n, req.CustomerID, req.RefundNo), nil
}

func main() {
	ctx := context.Background()
	r := &Refunds{}
	w := NewIdempotentRefunds(r, idem.NewExecutor(memstore.New(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventClaimed {
			fmt.Println("  claimed key", ev.Key.Text)
		}
	}), idem.SingleTenant()))
	for _, req := range []RefundRequest{
		{CustomerID: "a", RefundNo: "bc", Cents: 1},
		{CustomerID: "ab", RefundNo: "c", Cents: 1},
		{CustomerID: "a", RefundNo: "bc", Cents: 1},
	} {
		out, err := w.Refund(ctx, req)
		fmt.Println(out, err)
	}
	fmt.Println("refunds made:", r.n)
}
