// ErrorOnly: methods that return only an error. A transient error releases
// the key (the retry runs again); success and idem.Final errors are stored
// and replayed.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var errNetwork = errors.New("network unreachable")

type Shipper struct {
	calls     int
	failFirst bool
}

//idem:key=orderID ttl=1h
func (s *Shipper) Ship(ctx context.Context, orderID int64) error {
	s.calls++
	if s.failFirst && s.calls == 1 {
		return errNetwork
	}
	return nil
}

//idem:key=orderID ttl=1h
func (s *Shipper) Cancel(ctx context.Context, orderID int64, reason string) error {
	s.calls++
	return idem.Final(fmt.Errorf("order %d already shipped", orderID))
}

func main() {
	ctx := context.Background()
	s := &Shipper{failFirst: true}
	w := NewIdempotentShipper(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	fmt.Println("ship 1:", w.Ship(ctx, 1))
	fmt.Println("ship 1 again (the failure released the key):", w.Ship(ctx, 1))
	fmt.Println("ship 1 once more (replayed):", w.Ship(ctx, 1))
	fmt.Println("calls:", s.calls)

	err := w.Cancel(ctx, 1, "changed my mind")
	fmt.Println("cancel:", err, errors.Is(err, idem.ErrFinal))
	err = w.Cancel(ctx, 1, "changed my mind")
	fmt.Println("cancel again (replayed):", err, errors.Is(err, idem.ErrFinal))
	fmt.Println("calls:", s.calls)
}
