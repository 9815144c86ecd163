// ParamNames: parameters named like the wrapper's own names (w, k, h, ex,
// err, v, key, hash, next, idem) and an unnamed parameter: the generated
// locals, receiver and imports step aside.
package main

import (
	"context"
	"fmt"

	rt "github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Pair struct{ In *Inner }

type Inner struct{ V string }

type Weird struct{ calls int }

//idem:key=k+h+w.In.V+ex ttl=1m
func (s *Weird) Do(ctx context.Context, k string, h int, w Pair, ex, err, key, hash, next, idem string, v bool) (string, error) {
	s.calls++
	return fmt.Sprint(k, h, w.In.V, ex, err, key, hash, next, idem, v), nil
}

//idem:key=id ttl=1m
func (s *Weird) Drop(ctx context.Context, id string, _ int) error {
	s.calls++
	return nil
}

func main() {
	ctx := context.Background()
	s := &Weird{}
	wr := NewIdempotentWeird(s, rt.NewExecutor(memstore.New(), rt.SingleTenant()))
	for range 2 {
		out, err := wr.Do(ctx, "k", 1, Pair{In: &Inner{V: "v"}}, "ex", "err", "key", "hash", "next", "idem", true)
		fmt.Println(out, err)
	}
	_, err := wr.Do(ctx, "k", 1, Pair{}, "ex", "", "", "", "", "", false)
	fmt.Println("nil w.In:", err)
	fmt.Println(wr.Drop(ctx, "x", 1), wr.Drop(ctx, "x", 1))
	fmt.Println("calls:", s.calls)
}
