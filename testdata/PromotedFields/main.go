// PromotedFields: a key path through fields promoted from an unexported
// embedded struct of another package uses the promoted selectors
// (req.ID, req.In.Code), with the nil checks the package can write.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/testdata/PromotedFields/dep"
)

// Svc counts its calls.
type Svc struct{ calls int }

// Do keys on promoted fields of a pointer parameter.
//
//idem:key=req.ID+req.Seq+req.In.Code ttl=1m
func (s *Svc) Do(ctx context.Context, req *dep.Req) (int, error) {
	s.calls++
	return s.calls, nil
}

// Val keys on a promoted field of a value parameter.
//
//idem:key=req.ID ttl=1m
func (s *Svc) Val(ctx context.Context, req dep.Req) (int, error) {
	s.calls++
	return s.calls, nil
}

func main() {
	ctx := context.Background()
	s := &Svc{}
	w := NewIdempotentSvc(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	r := dep.NewReq("a", 1, &dep.Inner{Code: "c"})
	for range 2 {
		fmt.Println(w.Do(ctx, &r))
	}
	_, err := w.Do(ctx, nil)
	fmt.Println("nil req:", errors.Is(err, idem.ErrMissingKey))
	noIn := dep.NewReq("a", 1, nil)
	_, err = w.Do(ctx, &noIn)
	fmt.Println("nil req.In:", errors.Is(err, idem.ErrMissingKey))
	fmt.Println(w.Val(ctx, r))
	fmt.Println(w.Val(ctx, r))
	fmt.Println("calls:", s.calls)
}
