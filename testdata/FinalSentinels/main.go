// FinalSentinels: errors listed in final= are stored and replayed, and the
// replayed error is errors.Is-equal to the sentinel; other errors release the
// key so that a retry runs the method again.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var (
	ErrInsufficientFunds = errors.New("insufficient funds")
	ErrOrderClosed       = errors.New("order closed")
	errTimeout           = errors.New("bank timeout")
)

type Bank struct {
	balance int
	calls   int
	flaky   bool
}

//idem:key=orderID ttl=24h final=ErrInsufficientFunds|ErrOrderClosed
func (b *Bank) Debit(ctx context.Context, orderID string, cents int) (int, error) {
	b.calls++
	switch {
	case b.flaky:
		b.flaky = false
		return 0, errTimeout
	case orderID == "closed":
		return 0, ErrOrderClosed
	case cents > b.balance:
		return 0, fmt.Errorf("debit %d of %d: %w", cents, b.balance, ErrInsufficientFunds)
	}
	b.balance -= cents
	return b.balance, nil
}

func main() {
	ctx := context.Background()
	b := &Bank{balance: 100}
	w := NewIdempotentBank(b, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	_, err := w.Debit(ctx, "o1", 500)
	fmt.Println("o1:", err)
	b.balance = 1000 // the money arrives, but the outcome of o1 stands
	_, err = w.Debit(ctx, "o1", 500)
	fmt.Println("o1 replayed:", err, errors.Is(err, ErrInsufficientFunds), errors.Is(err, idem.ErrFinal))

	_, err = w.Debit(ctx, "closed", 1)
	_, err2 := w.Debit(ctx, "closed", 1)
	fmt.Println("closed:", errors.Is(err, ErrOrderClosed), errors.Is(err2, ErrOrderClosed), err2)

	b.flaky = true
	_, err = w.Debit(ctx, "o2", 10)
	fmt.Println("o2 transient:", err)
	bal, err := w.Debit(ctx, "o2", 10)
	fmt.Println("o2 retried:", bal, err)
	fmt.Println("calls:", b.calls)
}
