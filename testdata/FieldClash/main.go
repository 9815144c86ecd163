// FieldClash: the wrapped type has a field named ex and a method named
// idemEx, which the wrapper would shadow: the executor field takes another
// name, and both stay reachable through the wrapper.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Exchange struct {
	ex    string // the exchange's code
	fills int
}

func (e *Exchange) idemEx() string { return "not the executor" }

//idem:key=orderID ttl=1h
func (e *Exchange) Fill(ctx context.Context, orderID string) (string, error) {
	e.fills++
	return fmt.Sprintf("%s filled %s (%d)", e.ex, orderID, e.fills), nil
}

func main() {
	w := NewIdempotentExchange(&Exchange{ex: "XNAS"}, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for range 2 {
		fmt.Println(w.Fill(context.Background(), "o-1"))
	}
	fmt.Println("promoted:", w.ex, w.idemEx())
}
