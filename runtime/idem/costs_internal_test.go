package idem

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"
)

// The benchmarks of this file price, one by one, what issue 38 took out of
// a call on memstore (docs/decisions/memory-wrapper-cost.md): each pairs
// what a call did before with what it does now.

type costReceipt struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

var costBody, _ = json.Marshal(costReceipt{OrderID: "order-123456", Customer: "c-42", Amount: 4250, Currency: "EUR", Status: "placed"})

// A replay's decode: JSONCodec's strict decoder into a *T that escapes
// (before), json.Unmarshal into the value (now).
func BenchmarkCostDecodeStrict(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var v *costReceipt
		if err := (JSONCodec{}).Unmarshal(costBody, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCostDecodeFast(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeJSON[*costReceipt](costBody); err != nil {
			b.Fatal(err)
		}
	}
}

// requestContext is a request's context as a server hands it on: a
// cancellable one with a deadline and three values.
func requestContext(b *testing.B) context.Context {
	type k1 struct{}
	type k2 struct{}
	type k3 struct{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	ctx = context.WithValue(ctx, k1{}, 1)
	ctx, cancel2 := context.WithCancel(ctx)
	b.Cleanup(cancel2)
	return context.WithValue(context.WithValue(ctx, k2{}, 2), k3{}, 3)
}

// The context reads of a call that uses none of the runtime's values:
// three lookups, each a walk for its key and one for DoorContextKey
// (before), one walk (now).
func BenchmarkCostContextBefore(b *testing.B) {
	type tenantKey struct{}
	type decisionsKey struct{}
	type infoKey struct{}
	ctx := requestContext(b)
	before := func(key any) any {
		if v := ctx.Value(key); v != nil {
			return v
		}
		if door, ok := ctx.Value(DoorContextKey).(context.Context); ok && door != ctx {
			return door.Value(key)
		}
		return nil
	}
	for b.Loop() {
		if before(decisionsKey{}) != nil || before(tenantKey{}) != nil || before(infoKey{}) != nil {
			b.Fatal("found")
		}
	}
}

func BenchmarkCostContextNow(b *testing.B) {
	ctx := requestContext(b)
	for b.Loop() {
		if s := lookup(ctx, fTenant|fDecisions|fInfo); s.found != 0 {
			b.Fatal("found")
		}
	}
}

// The Complete's context: context.WithoutCancel (before), made in the
// method context's allocation (now).
func BenchmarkCostDetachedBefore(b *testing.B) {
	ctx := requestContext(b)
	b.ReportAllocs()
	for b.Loop() {
		kc := &keyContext{Context: ctx}
		costSink, costSink2 = kc, context.WithoutCancel(ctx)
	}
}

func BenchmarkCostDetachedNow(b *testing.B) {
	ctx := requestContext(b)
	b.ReportAllocs()
	for b.Loop() {
		kc := &keyContext{Context: ctx}
		costSink, costSink2 = kc, kc.detached()
	}
}

// costSink and costSink2 keep the contexts of the detached benchmarks on
// the heap, as a call's are (the method and the store keep them).
var costSink, costSink2 context.Context

// The op check and the result type's Meta: two sync.Map loads (before),
// the Method's prepared answer (now).
func BenchmarkCostPrepareBefore(b *testing.B) {
	ex := NewExecutor(nopStore{}, SingleTenant())
	m := &Method{Op: "github.com/idemgen/idemgen/internal/benchcmp/orders.Service.Place", Func: "github.com/idemgen/idemgen/internal/benchcmp/orders.(*Service).Place", TTL: time.Minute}
	var metas sync.Map
	t := reflect.TypeFor[*costReceipt]()
	metas.Store(t, resultMeta(t))
	for b.Loop() {
		if ex.checkOp(m) != nil {
			b.Fatal("refused")
		}
		if _, ok := metas.Load(t); !ok {
			b.Fatal("no meta")
		}
	}
}

func BenchmarkCostPrepareNow(b *testing.B) {
	ex := NewExecutor(nopStore{}, SingleTenant())
	m := &Method{Op: "github.com/idemgen/idemgen/internal/benchcmp/orders.Service.Place", Func: "github.com/idemgen/idemgen/internal/benchcmp/orders.(*Service).Place", TTL: time.Minute}
	t := reflect.TypeFor[*costReceipt]()
	for b.Loop() {
		if _, err := ex.prepare(m, t); err != nil {
			b.Fatal(err)
		}
	}
}

// A first call's two liveness instants: time.Now (before), the monotonic
// clock (now).
func BenchmarkCostInstantBefore(b *testing.B) {
	ex := NewExecutor(nopStore{}, SingleTenant())
	for b.Loop() {
		_ = ex.now()
		_ = ex.now()
	}
}

func BenchmarkCostInstantNow(b *testing.B) {
	ex := NewExecutor(nopStore{}, SingleTenant())
	for b.Loop() {
		_ = ex.instant()
		_ = ex.instant()
	}
}
