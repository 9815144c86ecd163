// RenewLease: renew=true (on a method, or in //idem:defaults) makes the
// executor renew the claim's lease while the method runs; it needs a store
// that renews (idem.Renewer), and says so on a store that cannot.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Exporter exports reports; exports may run longer than their lease.
//
//idem:defaults ttl=1h lease=30s
type Exporter struct{ runs int }

// Export exports a report.
//
//idem:key=name renew=true
func (e *Exporter) Export(ctx context.Context, name string) (string, error) {
	e.runs++
	return "exported " + name, nil
}

// Ping pings; renew=false is the default, written out.
//
//idem:key=name renew=false
func (e *Exporter) Ping(ctx context.Context, name string) (string, error) {
	e.runs++
	return "pong " + name, nil
}

// plainStore hides memstore's Renew: a store that cannot renew leases.
type plainStore struct{ idem.Store }

func main() {
	ctx := context.Background()
	e := &Exporter{}
	w := NewIdempotentExporter(e, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	out, err := w.Export(ctx, "q3")
	fmt.Println("first:", out, err)
	out, err = w.Export(ctx, "q3")
	fmt.Println("retry:", out, err, "runs:", e.runs)

	p := NewIdempotentExporter(e, idem.NewExecutor(plainStore{memstore.New()}, idem.SingleTenant()))
	_, err = p.Export(ctx, "q4")
	fmt.Println("on a store that cannot renew:", errors.Is(err, idem.ErrMisconfigured))
	out, err = p.Ping(ctx, "q4")
	fmt.Println("without renew:", out, err, "runs:", e.runs)
}
