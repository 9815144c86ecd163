// FinalAnySentinel: a replay of idem.Final(ErrX) keeps errors.Is(err, ErrX)
// for every exported error variable of the service's package, not only for
// those in final=.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var (
	ErrCardDeclined = errors.New("card declined")
	ErrFraud        = errors.New("fraud suspected")
	ErrTimeout      = errors.New("bank timeout")
	errInternal     = errors.New("internal")
	// NotAnError is exported but not an error: not a sentinel.
	NotAnError = "x"
)

type Shop struct{ runs int }

//idem:key=order ttl=1h final=ErrFraud
func (s *Shop) Checkout(ctx context.Context, order string) (string, error) {
	s.runs++
	switch order {
	case "declined":
		return "", idem.Final(fmt.Errorf("checkout %s: %w", order, ErrCardDeclined))
	case "fraud":
		return "", ErrFraud
	case "internal":
		return "", idem.Final(errInternal)
	case "timeout":
		return "", ErrTimeout
	}
	return "ok " + order, nil
}

func main() {
	ctx := context.Background()
	s := &Shop{}
	w := NewIdempotentShop(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for _, order := range []string{"declined", "fraud", "internal"} {
		_, first := w.Checkout(ctx, order)
		_, again := w.Checkout(ctx, order)
		fmt.Printf("%s: %v | replay: %v declined=%v fraud=%v final=%v\n", order, first, again,
			errors.Is(again, ErrCardDeclined), errors.Is(again, ErrFraud), errors.Is(again, idem.ErrFinal))
	}
	_, err := w.Checkout(ctx, "timeout")
	_, err2 := w.Checkout(ctx, "timeout")
	fmt.Println("timeout:", err, err2, "transient:", !errors.Is(err2, idem.ErrFinal))
	fmt.Println("runs:", s.runs)
}
