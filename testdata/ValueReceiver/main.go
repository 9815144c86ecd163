// ValueReceiver: a value-receiver method, keyed by fields of a struct
// parameter passed by value (a string and an integer).
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Transfer struct {
	Account string
	Seq     int64
	Cents   int
}

type Ledger struct{ posted *int }

//idem:key=t.Account+t.Seq ttl=10m
func (l Ledger) Post(ctx context.Context, t Transfer) (int, error) {
	*l.posted += t.Cents
	return *l.posted, nil
}

func main() {
	ctx := context.Background()
	var total int
	w := NewIdempotentLedger(&Ledger{posted: &total}, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	for _, t := range []Transfer{
		{Account: "acc-1", Seq: 1, Cents: 100},
		{Account: "acc-1", Seq: 1, Cents: 100}, // a retry
		{Account: "acc-1", Seq: 2, Cents: 50},
		{Account: "acc-2", Seq: 1, Cents: 7},
	} {
		balance, err := w.Post(ctx, t)
		fmt.Printf("post %s#%d: balance %d, err %v\n", t.Account, t.Seq, balance, err)
	}
	_, err := w.Post(ctx, Transfer{Account: "acc-1", Seq: 1, Cents: 999})
	fmt.Println("same key, other cents:", errors.Is(err, idem.ErrPayloadMismatch))
	_, err = w.Post(ctx, Transfer{Seq: 3})
	fmt.Println("empty account:", errors.Is(err, idem.ErrMissingKey))
	fmt.Println("total posted:", total)
}
