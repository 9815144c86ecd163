package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// payOrder is what idemgen generates for
//
//	//idem:key=order ttl=24h
//	func (s *Orders) Pay(ctx context.Context, order string, amount int) (string, error)
func payOrder(ctx context.Context, ex *idem.Executor, order string, amount int, fn func(context.Context) (string, error)) (string, error) {
	m := idem.Method{Op: "Orders.Pay", TTL: 24 * time.Hour}
	var k idem.KeyParts
	k.String("order", order)
	var h idem.Hasher
	h.String(order)
	h.Int(int64(amount))
	return idem.Do(ctx, ex, &m, &k, &h, fn)
}

// A door, a wrapper and the tenant: the middleware names the caller
// (WithTenant), puts it in the handler's context, and the generated
// wrapper the handler calls with r.Context() scopes its record by it,
// although its executor is SingleTenant. Two tenants paying their own
// order 1 get their own receipts; a tenant paying again under a new
// Idempotency-Key gets its own receipt back, marked as decided by the
// business key; another amount for the same order is the business key's
// conflict, not the Idempotency-Key's.
func Example_tenantToWrapper() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		amount, _ := strconv.Atoi(r.URL.Query().Get("amount"))
		receipt, err := payOrder(r.Context(), ex, r.PathValue("id"), amount, func(ctx context.Context) (string, error) {
			tenant, _ := idem.TenantFromContext(ctx)
			return "paid by " + tenant, nil // the payment itself
		})
		if err != nil {
			if !idemhttp.WriteError(w, err) { // a refusal of the wrapper, named as such
				http.Error(w, "payment failed", http.StatusInternalServerError)
			}
			return
		}
		fmt.Fprint(w, receipt)
	})
	h := idemhttp.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }))(mux)

	pay := func(account, key, amount string) {
		r := httptest.NewRequest("POST", "/orders/1/pay?amount="+amount, strings.NewReader(`{}`))
		r.Header.Set("X-Account", account)
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if w.Code >= 400 {
			body = body[strings.Index(body, "#")+1 : strings.Index(body, `","`)]
		}
		fmt.Printf("%-6s %s: %d %s replayed=%q by=%q\n", account, key, w.Code, body,
			w.Header().Get(idemhttp.ReplayedHeader), w.Header().Get(idemhttp.ReplayedByHeader))
	}
	pay("acme", "k1", "100")
	pay("globex", "k2", "100")
	pay("globex", "k2", "100")
	pay("globex", "k3", "100")
	pay("acme", "k4", "250")
	pay("", "k5", "100")
	// Output:
	// acme   k1: 200 paid by acme replayed="" by=""
	// globex k2: 200 paid by globex replayed="" by=""
	// globex k2: 200 paid by globex replayed="true" by=""
	// globex k3: 200 paid by globex replayed="" by="business-key"
	// acme   k4: 422 business-key-reused replayed="" by=""
	//        k5: 403 missing-tenant replayed="" by=""
}
