// Unicode: a type whose wrapper name is not ASCII (IdempotentÜberweisung),
// referenced before it is generated. Its type default ttl covers a
// method's retry budget: the generated doc states both, each with its own
// arithmetic.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Überweisung is a transfer service.
//
//idem:defaults ttl=24h
type Überweisung struct{ calls int }

// Buchen books a transfer.
//
//idem:key=id retries=3 timeout=2s backoff=1s downstream=30s margin=10s
func (u *Überweisung) Buchen(ctx context.Context, id string) (int, error) {
	u.calls++
	return u.calls, nil
}

// Stornieren cancels.
//
//idem:key=id retries=2 timeout=150s
func (u *Überweisung) Stornieren(ctx context.Context, id string) error {
	u.calls++
	return nil
}

var _ *IdempotentÜberweisung = NewIdempotentÜberweisung(nil, nil)

func main() {
	ctx := context.Background()
	u := &Überweisung{}
	w := NewIdempotentÜberweisung(u, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	fmt.Println(w.Buchen(ctx, "x"))
	fmt.Println(w.Buchen(ctx, "x"))
	fmt.Println("calls:", u.calls)
}
