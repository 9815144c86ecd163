package idemotel_test

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Turning the instrumentation on for an executor, a sweeper and the size of
// a memstore, on the global meter and tracer providers.
func Example() {
	ctx := context.Background()
	st := memstore.New(memstore.WithMaxRecords(100_000))
	ex := idem.NewExecutor(st, idemotel.Instrument(idemotel.WithStoreName("memstore")), idem.SingleTenant())
	_ = ex // generated wrappers and idemhttp.New run on ex

	reg, err := idemotel.ObserveSize(st, 100_000, memstore.DefaultMaxBytes, idemotel.WithStoreName("memstore"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = reg.Unregister() }()

	observe, err := idemotel.SweepObserver(idemotel.WithStoreName("memstore"))
	if err != nil {
		panic(err)
	}
	stop := idem.NewSweeper(st, idem.WithSweepInterval(time.Minute), idem.WithSweepObserver(observe)).Start(ctx)
	defer stop()
	// Output:
}
