// The race detector makes sync.Pool drop values at random, so that the
// codec's pooled encoder state is allocated again on some calls and not
// others: the counts below are the program's only without it. make test
// runs this file without -race (and the rest of the package with it).

//go:build !race

package idem_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// The allocation budget of the wrapper on memstore (issue 38: a first call
// at most 2 allocations beyond a direct call and json.Marshal; a replay
// nothing beyond json.Unmarshal). These tests pin what the executor and
// memstore allocate beyond the codec's own work, counted by
// testing.AllocsPerRun: exact counts, not timings, so that they hold on
// any machine.

type allocOrder struct {
	ID, Customer, Currency string
	Amount                 int64
}

type allocReceipt struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

var allocMethod = idem.Method{Op: "example.com/shop.Service.Place", Func: "example.com/shop.(*Service).Place", TTL: 5 * time.Minute, Lease: 30 * time.Second, Scheme: 1}

// place is what idemgen generates for Place(ctx, order, op) with the key
// order.ID+op; the method returns r.
func place(ctx context.Context, ex *idem.Executor, o *allocOrder, op string, r *allocReceipt) (*allocReceipt, error) {
	var k idem.KeyParts
	k.String("order.ID", o.ID)
	k.String("op", op)
	var h idem.Hasher
	h.String(o.ID)
	h.String(o.Customer)
	h.Int(o.Amount)
	h.String(o.Currency)
	h.String(op)
	return idem.Do(ctx, ex, &allocMethod, &k, &h, func(context.Context) (*allocReceipt, error) { return r, nil })
}

func allocOrders(n int) []allocOrder {
	orders := make([]allocOrder, n)
	for i := range orders {
		orders[i] = allocOrder{ID: "order-" + strconv.Itoa(i), Customer: "c-42", Currency: "EUR", Amount: 4250}
	}
	return orders
}

var allocResult = &allocReceipt{OrderID: "x", Customer: "c-42", Amount: 4250, Currency: "EUR", Status: "placed"}

// allocRuns is how many calls AllocsPerRun averages; the memstore's maps
// growing from empty add about 0.1 allocation per call, which the integer
// average drops.
const allocRuns = 500

// allocRounds is how many times minAllocs counts.
const allocRounds = 3

// minAllocs is testing.AllocsPerRun(allocRuns, f) at its lowest of
// allocRounds rounds. A garbage collection during a round empties the
// sync.Pools that the codec (encoding/json's encoder state) and the
// runtime keep, and refilling them allocates on the caller's account: under
// -race on a loaded machine, one round in about thirty counted a first
// call one allocation over its pin. The lowest round is the call's own
// cost. f runs (allocRuns+1)×allocRounds times.
func minAllocs(f func()) float64 {
	least := math.Inf(1)
	for range allocRounds {
		least = min(least, testing.AllocsPerRun(allocRuns, f))
	}
	return least
}

// TestAllocsFirstCall: a first call allocates, besides the codec's encoding
// of the result, the method's context (carrying the key, and in the same
// allocation the detached context of the Complete) and memstore's record:
// 2. (memstore keeps the encoding it is given, as Store.Complete allows,
// and needs no Key.Text; the result type's Meta is one slice per type.)
func TestAllocsFirstCall(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	const want = 2
	ctx, cancel := context.WithCancel(context.Background()) // a request's context is cancellable
	defer cancel()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	orders := allocOrders(allocRounds * (allocRuns + 1))
	i := 0
	got := minAllocs(func() {
		if _, err := place(ctx, ex, &orders[i], "pay", allocResult); err != nil {
			t.Fatal(err)
		}
		i++
	})
	codec := minAllocs(func() {
		if _, err := (idem.JSONCodec{}).Marshal(allocResult); err != nil {
			t.Fatal(err)
		}
	})
	checkAllocs(t, "first call", got-codec, want)
}

// TestAllocsReplay: a replay allocates nothing beyond what json.Unmarshal
// of the stored result into a *T allocates: 0. The record names its result
// type's shape, so that the replay skips JSONCodec's strict decoder
// (resulttype.go), and a pointer result is decoded into the value json
// would allocate, without a variable escaping through json's any.
func TestAllocsReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	const want = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	o := allocOrders(1)[0]
	if _, err := place(ctx, ex, &o, "pay", allocResult); err != nil {
		t.Fatal(err)
	}
	got := minAllocs(func() {
		r, err := place(ctx, ex, &o, "pay", nil)
		if err != nil || r.Status != "placed" {
			t.Fatalf("replay: %+v, %v", r, err)
		}
	})
	body, err := (idem.JSONCodec{}).Marshal(allocResult)
	if err != nil {
		t.Fatal(err)
	}
	codec := minAllocs(func() {
		r := new(allocReceipt)
		if err := json.Unmarshal(body, r); err != nil {
			t.Fatal(err)
		}
	})
	checkAllocs(t, "replay", got-codec, want)
}

// checkAllocs fails when the executor and store allocate more than want,
// and when they allocate fewer: then lower want, so that the gain is kept.
func checkAllocs(t *testing.T, what string, got float64, want int) {
	t.Helper()
	switch {
	case got > float64(want):
		t.Errorf("%s: %v allocations beyond the codec's, want at most %d", what, got, want)
	case got < float64(want):
		t.Errorf("%s: %v allocations beyond the codec's, fewer than the %d pinned: lower the pin", what, got, want)
	}
}

func BenchmarkFirstCall(b *testing.B) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	ctx := context.Background()
	orders := allocOrders(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := place(ctx, ex, &orders[i], "pay", allocResult); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplay(b *testing.B) {
	benchReplay(b, context.Background(), func() bool { return true })
}

// benchReplay replays one call b.N times with ctx; ok checks each replay.
func benchReplay(b *testing.B, ctx context.Context, ok func() bool) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	o := allocOrders(1)[0]
	if _, err := place(ctx, ex, &o, "pay", allocResult); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := place(ctx, ex, &o, "pay", nil); err != nil || !ok() {
			b.Fatal(err)
		}
	}
}

// TestAllocsCallInfo: a CallInfo costs its caller one allocation, in
// WithCallInfo, and the calls made with it none: the first call and the
// replay allocate what they do without it (TestAllocsFirstCall,
// TestAllocsReplay, which pin that a call without one allocates nothing
// for it either).
func TestAllocsCallInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	var kept context.Context
	if got := minAllocs(func() { kept, _ = idem.WithCallInfo(base) }); got != 1 || kept == nil {
		t.Errorf("WithCallInfo: %v allocations, want 1", got)
	}
	ctx, info := idem.WithCallInfo(base)
	orders := allocOrders(allocRounds * (allocRuns + 1))
	i := 0
	first := minAllocs(func() {
		if _, err := place(ctx, ex, &orders[i], "pay", allocResult); err != nil || info.Replayed() {
			t.Fatalf("first call: %v, replayed %v", err, info.Replayed())
		}
		i++
	})
	replay := minAllocs(func() {
		if _, err := place(ctx, ex, &orders[0], "pay", nil); err != nil || !info.Replayed() {
			t.Fatalf("replay: %v, replayed %v", err, info.Replayed())
		}
	})
	codecFirst := minAllocs(func() { _, _ = (idem.JSONCodec{}).Marshal(allocResult) })
	body, _ := (idem.JSONCodec{}).Marshal(allocResult)
	codecReplay := minAllocs(func() { _ = json.Unmarshal(body, new(allocReceipt)) })
	checkAllocs(t, "first call with a CallInfo", first-codecFirst, 2)
	checkAllocs(t, "replay with a CallInfo", replay-codecReplay, 0)
}

// BenchmarkReplayCallInfo is BenchmarkReplay with a CallInfo read after
// every call; set beside BenchmarkReplay, it is the CallInfo's cost.
func BenchmarkReplayCallInfo(b *testing.B) {
	ctx, info := idem.WithCallInfo(context.Background())
	benchReplay(b, ctx, info.Replayed)
}
