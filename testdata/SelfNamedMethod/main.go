// SelfNamedMethod: a type with a method named like itself (Pay.Pay, and an
// interface Store with a method Store) cannot be embedded in its wrapper
// (the field Pay and the method Pay would clash): the wrapper holds it in a
// field and passes the other methods through.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Pay is a service with a method Pay.
type Pay struct{ calls int }

// Pay charges.
//
//idem:key=id ttl=1m
func (p *Pay) Pay(ctx context.Context, id string) (int, error) {
	p.calls++
	return p.calls, nil
}

// Refund is not annotated: the wrapper passes it through.
func (p *Pay) Refund(ctx context.Context, ids ...string) (int, error) { return len(ids), nil }

// Calls is not annotated either.
func (p Pay) Calls() int { return p.calls }

// Store is an interface with a method Store.
type Store interface {
	// Store saves.
	//
	//idem:key=id ttl=1m
	Store(ctx context.Context, id string) error
	// Load is passed through.
	Load(id string) (string, bool)
}

type mem struct{ saved map[string]int }

func (m *mem) Store(ctx context.Context, id string) error { m.saved[id]++; return nil }

func (m *mem) Load(id string) (string, bool) { return id, m.saved[id] > 0 }

func main() {
	ctx := context.Background()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	p := &Pay{}
	w := NewIdempotentPay(p, ex)
	fmt.Println(w.Pay(ctx, "a"))
	fmt.Println(w.Pay(ctx, "a"))
	fmt.Println(w.Refund(ctx, "x", "y"))
	fmt.Println("calls:", w.Calls())

	m := &mem{saved: map[string]int{}}
	var s Store = NewIdempotentStore(m, ex)
	fmt.Println(s.Store(ctx, "k"), s.Store(ctx, "k"))
	fmt.Println(s.Load("k"))
	fmt.Println("stored:", m.saved["k"])
}
