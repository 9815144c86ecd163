package idemhttptest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// This file is the table of issue 33's first class, "a layer's tenant does
// not reach the layers below it", for one door: the adapter running the
// suite. Each door (net/http, gin, echo, Fiber) runs it through Run, on
// every store, so that a new door joins the table by running the suite.
//
// Its cells are the wirings a user can write, from the docs:
//
//   - the executor of the wrapped method the handler calls: SingleTenant,
//     WithTenant reading the door's tenant from the context
//     (idem.TenantFromContext), or WithTenant returning "" (a function that
//     relies on the door);
//   - that executor is the door's own, or the door has one of its own
//     (SingleTenant: "the middleware scopes its keys itself");
//   - the door: idemhttp.WithTenant (the caller named by a header) or
//     idemhttp.SingleTenant.
//
// In every cell two tenants, acme and globex, pay the same order (one
// business key) with the same body under different Idempotency-Keys. The
// cell asserts who ran and what each tenant got: with a tenant-scoped door,
// the method runs once per tenant and no tenant is ever answered with the
// other's receipt (nor with a replay of it, nor a business-key conflict of
// it); a request without a tenant is refused and runs nothing. With a
// single-tenant door, a SingleTenant executor is one key space said twice in
// the code (the second tenant gets the first's receipt, and the response
// says that a business key decided it); an executor that asked for tenancy
// refuses every call (403 missing-tenant) and runs nothing.
//
// Each tenant then retries with its own key (the door replays its own
// receipt), pays again under a new key (the wrapper replays its own
// receipt: Idempotent-Replayed-By: business-key), and pays another amount
// under a new key (422 business-key-reused, not the Idempotency-Key's
// key-reused).

// payOp is the operation of the wrapped method.
const payOp = "Orders.Pay"

// pay is what idemgen generates for
//
//	//idem:key=order ttl=1h
//	func (s *Orders) Pay(ctx context.Context, order string, amount int) (string, error)
func pay(ctx context.Context, ex *idem.Executor, order string, amount int, fn func(context.Context) (string, error)) (string, error) {
	m := idem.Method{Op: payOp, TTL: time.Hour}
	var k idem.KeyParts
	k.String("order", order)
	var h idem.Hasher
	h.String(order)
	h.Int(int64(amount))
	return idem.Do(ctx, ex, &m, &k, &h, fn)
}

// tenancyWiring is one cell's wiring.
type tenancyWiring struct {
	executor string // "SingleTenant", "WithTenant(door)", "WithTenant(empty)"
	own      bool   // the wrapper's executor is the door's own
	door     string // "WithTenant", "SingleTenant"
}

func (w tenancyWiring) String() string {
	shared := "WrapperOwnExecutor"
	if w.own {
		shared = "DoorsExecutor"
	}
	return "Executor" + w.executor + "/" + shared + "/Door" + w.door
}

func (w tenancyWiring) executorOption() idem.Option {
	switch w.executor {
	case "WithTenant(door)":
		return idem.WithTenant(func(ctx context.Context) string {
			t, _ := idem.TenantFromContext(ctx)
			return t
		})
	case "WithTenant(empty)":
		return idem.WithTenant(func(context.Context) string { return "" })
	}
	return idem.SingleTenant()
}

// tenancyWirings is every cell.
func tenancyWirings() []tenancyWiring {
	var all []tenancyWiring
	for _, ex := range []string{"SingleTenant", "WithTenant(door)", "WithTenant(empty)"} {
		for _, own := range []bool{true, false} {
			for _, door := range []string{"WithTenant", "SingleTenant"} {
				all = append(all, tenancyWiring{executor: ex, own: own, door: door})
			}
		}
	}
	return all
}

func (s *suite) testTenancyTable(t *testing.T) {
	for _, w := range tenancyWirings() {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			s.tenancyCell(t, w)
		})
	}
}

// tenancyCell runs one cell (see the file's comment).
func (s *suite) tenancyCell(t *testing.T, w tenancyWiring) {
	store := s.o.NewStore(t)
	wrapperEx := idem.NewExecutor(store, w.executorOption())
	doorEx := wrapperEx
	if !w.own {
		doorEx = idem.NewExecutor(store, idem.SingleTenant())
	}
	doorOpt := idemhttp.SingleTenant()
	if w.door == "WithTenant" {
		doorOpt = idemhttp.WithTenant(tenantHeader)
	}
	order := "order-" + idemhttp.GenerateKey() // one business key for the cell; the store may be shared
	var mu sync.Mutex
	ran := map[string]int{} // the method's runs, by the tenant the client sent
	url := s.o.Mount(t, Config{
		Executor: doorEx,
		Options:  []idemhttp.Option{doorOpt},
		Paths:    Paths,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			// A copy: an adapter's request may share its server's buffers
			// (Fiber's), reused once the request ends.
			caller := strings.Clone(r.Header.Get("X-Tenant"))
			var amount int
			if _, err := fmt.Sscanf(r.URL.Query().Get("amount"), "%d", &amount); err != nil {
				http.Error(rw, "amount: "+err.Error(), http.StatusBadRequest)
				return
			}
			receipt, err := pay(r.Context(), wrapperEx, order, amount, func(context.Context) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				ran[caller]++
				return fmt.Sprintf("receipt of %s for %d (run %d)", caller, amount, ran[caller]), nil
			})
			if err != nil {
				if !idemhttp.WriteError(rw, err) {
					http.Error(rw, err.Error(), http.StatusInternalServerError)
				}
				return
			}
			rw.Header().Set("Content-Type", "text/plain")
			rw.WriteHeader(http.StatusOK)
			_, _ = rw.Write([]byte(receipt))
		}),
	})
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	e := &env{t: t, url: url, c: &http.Client{Transport: tr}}
	send := func(tenant, key string, amount int) resp {
		t.Helper()
		var hdr []string
		if tenant != "" {
			hdr = []string{"X-Tenant", tenant}
		}
		return e.send("POST", fmt.Sprintf("/orders?amount=%d", amount), key, `{"order":"`+order+`"}`, hdr...)
	}
	runs := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]int, len(ran))
		for k, v := range ran {
			out[k] = v
		}
		return out
	}
	receiptOf := func(tenant string) string { return "receipt of " + tenant + " for 100 (run 1)" }
	tenants := []string{"acme", "globex"}
	keys := map[string]string{"acme": idemhttp.GenerateKey(), "globex": idemhttp.GenerateKey()}

	switch {
	case w.door == "WithTenant":
		// The door names the caller: whatever the executor's tenancy, each
		// tenant's order is its own.
		for _, tn := range tenants {
			want(t, send(tn, keys[tn], 100), 200, receiptOf(tn), false)
		}
		for _, tn := range tenants { // the client's retry: the door replays
			want(t, send(tn, keys[tn], 100), 200, receiptOf(tn), true)
		}
		for _, tn := range tenants { // the same payment under a new key: the wrapper replays
			r := send(tn, idemhttp.GenerateKey(), 100)
			want(t, r, 200, receiptOf(tn), false)
			if got := r.header.Get(idemhttp.ReplayedByHeader); got != idemhttp.ReplayedByBusinessKey {
				t.Fatalf("%s: a payment answered by the business key says %s %q, want %q", tn, idemhttp.ReplayedByHeader, got, idemhttp.ReplayedByBusinessKey)
			}
		}
		for _, tn := range tenants { // another amount under a new key: the business key's conflict
			r := send(tn, idemhttp.GenerateKey(), 200)
			wantProblem(t, r, 422, "business-key-reused")
		}
		// No tenant: refused by the door, nothing runs.
		wantProblem(t, send("", idemhttp.GenerateKey(), 100), 403, "missing-tenant")
		if got := runs(); len(got) != 2 || got["acme"] != 1 || got["globex"] != 1 {
			t.Fatalf("the method ran %v, want once for acme and once for globex", got)
		}
	case w.executor == "SingleTenant":
		// One key space, said in the code twice: the second tenant's
		// payment is the first's, and the response says a business key
		// decided it.
		want(t, send("acme", keys["acme"], 100), 200, receiptOf("acme"), false)
		r := send("globex", keys["globex"], 100)
		want(t, r, 200, receiptOf("acme"), false)
		if got := r.header.Get(idemhttp.ReplayedByHeader); got != idemhttp.ReplayedByBusinessKey {
			t.Fatalf("a payment answered by the business key says %s %q, want %q", idemhttp.ReplayedByHeader, got, idemhttp.ReplayedByBusinessKey)
		}
		want(t, send("globex", keys["globex"], 100), 200, receiptOf("acme"), true)
		wantProblem(t, send("globex", idemhttp.GenerateKey(), 200), 422, "business-key-reused")
		if got := runs(); len(got) != 1 || got["acme"] != 1 {
			t.Fatalf("the method ran %v, want once", got)
		}
	default:
		// The executor asked for tenancy and no layer names one: every
		// call is refused, by the door or the wrapper, and nothing runs.
		for _, tn := range tenants {
			wantProblem(t, send(tn, keys[tn], 100), 403, "missing-tenant")
			wantProblem(t, send(tn, keys[tn], 100), 403, "missing-tenant")
		}
		if got := runs(); len(got) != 0 {
			t.Fatalf("the method ran %v with no tenant, want never", got)
		}
	}
}

// testTenancyInFlight: while acme's payment of an order runs, acme paying it
// again under a new Idempotency-Key is the business key's conflict (409
// business-key-in-progress, with the Retry-After of the running call's
// lease, not 1 s), globex paying its own order of the same number is not
// held up by acme's, and acme's retry of the refused key, once the first
// payment is stored, gets its receipt, marked as decided by the business
// key. With Options.OneWriter the running call holds the store's only
// write lock: acme's second payment and globex's are both refused (503
// store-full) and run nothing, and their retries, once acme's first
// payment is stored, get acme's receipt (decided by the business key) and
// globex's own.
func (s *suite) testTenancyInFlight(t *testing.T) {
	const lease = 30 * time.Second
	store := s.o.NewStore(t)
	ex := idem.NewExecutor(store, idem.SingleTenant(), idem.WithLease(lease))
	order := "order-" + idemhttp.GenerateKey()
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	ran := map[string]int{}
	url := s.o.Mount(t, Config{
		Executor: ex,
		Options:  []idemhttp.Option{idemhttp.WithTenant(tenantHeader)},
		Paths:    Paths,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			receipt, err := pay(r.Context(), ex, order, 100, func(ctx context.Context) (string, error) {
				tenant, _ := idem.TenantFromContext(ctx)
				if tenant == "acme" {
					close(started)
					<-release
				}
				mu.Lock()
				defer mu.Unlock()
				ran[tenant]++
				return "receipt of " + tenant, nil
			})
			if err != nil {
				if !idemhttp.WriteError(rw, err) {
					http.Error(rw, err.Error(), http.StatusInternalServerError)
				}
				return
			}
			_, _ = rw.Write([]byte(receipt))
		}),
	})
	releaseOnce := closer(t, release) // after Mount: its cleanup runs before the server's Close
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	e := &env{t: t, url: url, c: &http.Client{Transport: tr}}
	send := func(tenant, key string) resp {
		t.Helper()
		return e.send("POST", "/orders", key, `{}`, "X-Tenant", tenant)
	}
	first := make(chan resp, 1)
	go func() {
		r, err := e.sendCtx(context.Background(), "POST", "/orders", "k-first-"+order, `{}`, "X-Tenant", "acme")
		if err != nil {
			t.Errorf("acme's first payment: %v", err)
		}
		first <- r
	}()
	select {
	case <-started:
	case <-time.After(hangGuard):
		t.Fatal("acme's payment never started")
	}
	second := "k-second-" + order
	r := send("acme", second)
	if s.o.OneWriter {
		// The running call holds the store's only write lock: every other
		// claim is refused once the lock timeout passes, whoever's it is,
		// and runs nothing.
		wantProblem(t, r, 503, "store-full")
		wantProblem(t, send("globex", "k-globex-"+order), 503, "store-full")
	} else {
		wantProblem(t, r, 409, "business-key-in-progress")
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || ra < 2 || ra > int(lease/time.Second) {
			t.Fatalf("Retry-After %q, want the running call's lease left (at most %v), not 1 s", r.header.Get("Retry-After"), lease)
		}
		want(t, send("globex", "k-globex-"+order), 200, "receipt of globex", false)
	}
	releaseOnce()
	select {
	case r := <-first:
		want(t, r, 200, "receipt of acme", false)
	case <-time.After(hangGuard):
		t.Fatal("acme's first payment never answered")
	}
	r = send("acme", second) // the refusal was not stored: the retry runs the handler, the wrapper replays
	want(t, r, 200, "receipt of acme", false)
	if got := r.header.Get(idemhttp.ReplayedByHeader); got != idemhttp.ReplayedByBusinessKey {
		t.Fatalf("%s %q, want %q", idemhttp.ReplayedByHeader, got, idemhttp.ReplayedByBusinessKey)
	}
	if s.o.OneWriter { // globex's refused payment, retried: its own receipt
		want(t, send("globex", "k-globex-"+order), 200, "receipt of globex", false)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || ran["acme"] != 1 || ran["globex"] != 1 {
		t.Fatalf("the method ran %v, want once for acme and once for globex", ran)
	}
}

// testTenancyPassThrough: a request the door does not protect (no key
// under WithOptionalKey; a GET) runs the handler with the door's tenant in
// its context all the same: two tenants calling the wrapped method for one
// order without a key get their own receipts, and a request without a
// tenant is refused by the wrapper (403 missing-tenant), not put in a
// shared key space.
func (s *suite) testTenancyPassThrough(t *testing.T) {
	ex := idem.NewExecutor(s.o.NewStore(t), idem.SingleTenant())
	order := "order-" + idemhttp.GenerateKey()
	var mu sync.Mutex
	ran := map[string]int{}
	url := s.o.Mount(t, Config{
		Executor: ex,
		Options:  []idemhttp.Option{idemhttp.WithTenant(tenantHeader), idemhttp.WithOptionalKey()},
		Paths:    Paths,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			receipt, err := pay(r.Context(), ex, order, 100, func(ctx context.Context) (string, error) {
				tenant, _ := idem.TenantFromContext(ctx)
				mu.Lock()
				defer mu.Unlock()
				ran[tenant]++
				return "receipt of " + tenant, nil
			})
			if err != nil {
				if !idemhttp.WriteError(rw, err) {
					http.Error(rw, err.Error(), http.StatusInternalServerError)
				}
				return
			}
			_, _ = rw.Write([]byte(receipt))
		}),
	})
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	e := &env{t: t, url: url, c: &http.Client{Transport: tr}}
	for _, method := range []string{"POST", "GET"} {
		for _, tn := range []string{"acme", "globex"} {
			r := e.send(method, "/orders", "", `{}`, "X-Tenant", tn)
			if r.status != 200 || string(r.body) != "receipt of "+tn {
				t.Fatalf("%s without a key, tenant %s: %d %q, want 200 %q", method, tn, r.status, r.body, "receipt of "+tn)
			}
		}
		wantProblem(t, e.send(method, "/orders", "", `{}`), 403, "missing-tenant")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || ran["acme"] != 1 || ran["globex"] != 1 {
		t.Fatalf("the method ran %v, want once for acme and once for globex", ran)
	}
}
