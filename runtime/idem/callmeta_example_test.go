package idem_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// traceHook is a CallHook whose observers are OriginObservers: each call
// names its own span (a tracing package takes it from its span context).
type traceHook struct{ calls byte }

func (h *traceHook) StartCall(ctx context.Context, _ *idem.Method, _ time.Time) (context.Context, idem.CallObserver) {
	h.calls++
	o := idem.TraceOrigin{Flags: 1}
	o.TraceID[15], o.SpanID[7] = h.calls, h.calls
	return ctx, &traceCall{origin: o}
}

type traceCall struct {
	nopCall // the CallObserver's methods (callmeta_test.go)
	origin  idem.TraceOrigin
}

func (c *traceCall) Origin() idem.TraceOrigin { return c.origin }
func (c *traceCall) Replaying(meta idem.CallMeta, err error) {
	fmt.Printf("replay of the call in %s (err %v)\n", meta.Origin.Traceparent(), err)
}

// An OriginObserver keeps the span of the call that ran the method with its
// outcome, and is told it by every replay; an operator's tool reads it back
// from the record with ParseMeta.
func ExampleOriginObserver() {
	store := memstore.New()
	ex := idem.NewExecutor(store, idem.WithCallHook(&traceHook{}), idem.SingleTenant())
	m := &idem.Method{Op: "billing.Charge", TTL: time.Hour}
	charge := func(ctx context.Context) (string, error) {
		var k idem.KeyParts
		k.String("order", "order-7")
		var h idem.Hasher
		h.String("order-7")
		return idem.Do(ctx, ex, m, &k, &h, func(context.Context) (string, error) { return "ch_1", nil })
	}
	_, _ = charge(context.Background()) // runs, and keeps its origin
	_, _ = charge(context.Background()) // replays: told the origin

	key, _ := idem.NewKey("", "billing.Charge", "order-7")
	e, _ := store.Lookup(context.Background(), key)
	meta, err := idem.ParseMeta(e.Outcome.Meta)
	fmt.Println("stored by", meta.Origin.Traceparent(), err)
	// Output:
	// replay of the call in 00-00000000000000000000000000000001-0000000000000001-01 (err <nil>)
	// stored by 00-00000000000000000000000000000001-0000000000000001-01 <nil>
}
