// BudgetTTL: the TTL derived from the retry budget,
// retries×(timeout+backoff)+downstream+margin, and a stated ttl that covers
// the budget (see want/idem_gen.go).
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
}

type Refunds struct{ n int }

//idem:key=req.CustomerID+"refund"+req.RefundNo
//idem:retries=2 timeout=2s backoff=500ms downstream=120s margin=30s   // ttl derived: 155s
//idem:inflight=wait:3s
func (r *Refunds) Refund(ctx context.Context, req RefundRequest) (int, error) {
	r.n++
	return r.n, nil
}

//idem:key=id ttl=1d retries=3 timeout=10s
func (r *Refunds) Void(ctx context.Context, id string) error { return nil }

func main() {
	ctx := context.Background()
	r := &Refunds{}
	w := NewIdempotentRefunds(r, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for range 2 {
		n, err := w.Refund(ctx, RefundRequest{CustomerID: "c1", RefundNo: "r1"})
		fmt.Println("refund:", n, err)
	}
	fmt.Println("void:", w.Void(ctx, "v1"))
}
