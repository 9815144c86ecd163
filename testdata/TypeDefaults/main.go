// TypeDefaults: //idem:defaults on the type applies to each annotated
// method; a method's own option wins.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Accounts owns customer accounts.
//
//idem:defaults key=req.AccountID ttl=48h lease=5s
type Accounts struct{ ops []string }

type Request struct {
	AccountID string
	Email     string
}

//idem:op=accounts.open
func (a *Accounts) Open(ctx context.Context, req Request) (string, error) {
	a.ops = append(a.ops, "open "+req.AccountID)
	return "opened", nil
}

//idem:ttl=15m
func (a *Accounts) Close(ctx context.Context, req Request) (string, error) {
	a.ops = append(a.ops, "close "+req.AccountID)
	return "closed", nil
}

//idem:key=req.Email+op ttl=1h
func (a *Accounts) Verify(ctx context.Context, req Request) (bool, error) {
	a.ops = append(a.ops, "verify "+req.Email)
	return true, nil
}

func main() {
	ctx := context.Background()
	a := &Accounts{}
	w := NewIdempotentAccounts(a, idem.NewExecutor(memstore.New(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventClaimed {
			fmt.Printf("  claimed %s/%s\n", ev.Key.Op, ev.Key.Text)
		}
	}), idem.SingleTenant()))
	req := Request{AccountID: "acc-1", Email: "ann@example.com"}
	for range 2 {
		o, _ := w.Open(ctx, req)
		c, _ := w.Close(ctx, req)
		v, _ := w.Verify(ctx, req)
		fmt.Println(o, c, v)
	}
	fmt.Println("ops:", a.ops)
}
