// ChanTypes: types whose spelling needs care (a channel of a receive-only
// channel, send-only channels of channels, funcs, generic instances,
// anonymous structs with tags and embedded fields) come out as written.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Box is generic.
type Box[T any] struct{ V T }

// Inner is embedded in an anonymous struct.
type Inner struct{ N int }

// Svc counts its calls.
type Svc struct{ calls int }

// Route takes channels and funcs, which are not fingerprinted.
//
//idem:key=id ttl=1m hash=id
func (s *Svc) Route(ctx context.Context, id string, in chan (<-chan int), out chan<- <-chan int, f func(chan<- int, ...string) (<-chan Box[int], error), meta struct {
	Inner
	Tag string `json:"tag,omitempty"`
}) (map[string][]Box[*Inner], error) {
	s.calls++
	return map[string][]Box[*Inner]{id: {{V: &Inner{N: s.calls}}}}, nil
}

func main() {
	ctx := context.Background()
	s := &Svc{}
	w := NewIdempotentSvc(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for range 2 {
		m, err := w.Route(ctx, "r", make(chan (<-chan int)), nil, nil, struct {
			Inner
			Tag string `json:"tag,omitempty"`
		}{})
		fmt.Println(m["r"][0].V.N, err)
	}
	fmt.Println("calls:", s.calls)
}
