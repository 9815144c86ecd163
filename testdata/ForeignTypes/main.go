// ForeignTypes: signatures with types of other packages (standard and a
// package whose name differs from its directory), composite types, and a
// generic type instantiated in a result.
package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	money "github.com/idemgen/idemgen/testdata/ForeignTypes/v2"
)

// Page is a generic result page.
type Page[T any] struct {
	Items []T
	Next  string
}

type Quotes struct{ calls int }

//idem:key=client+at ttl=1h
func (q *Quotes) Quote(ctx context.Context, client netip.Addr, at time.Time, amounts map[string][]money.Amount, tags []string) (Page[*money.Amount], error) {
	q.calls++
	var p Page[*money.Amount]
	for _, t := range tags {
		for _, a := range amounts[t] {
			p.Items = append(p.Items, &a)
		}
	}
	return p, nil
}

func main() {
	q := &Quotes{}
	w := NewIdempotentQuotes(q, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	amounts := map[string][]money.Amount{"eu": {{Cents: 100, Currency: "EUR"}}, "us": {{Cents: 250, Currency: "USD"}}}
	for range 2 {
		p, err := w.Quote(context.Background(), netip.MustParseAddr("192.0.2.1"), at, amounts, []string{"eu", "us"})
		fmt.Println(len(p.Items), *p.Items[0], *p.Items[1], err)
	}
	fmt.Println("calls:", q.calls)
}
