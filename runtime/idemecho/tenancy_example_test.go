package idemecho_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// payOrder is what idemgen generates for
//
//	//idem:key=order ttl=24h
//	func (s *Orders) Pay(ctx context.Context, order string) (string, error)
func payOrder(ctx context.Context, ex *idem.Executor, order string, fn func(context.Context) (string, error)) (string, error) {
	m := idem.Method{Op: "Orders.Pay", TTL: 24 * time.Hour}
	var k idem.KeyParts
	k.String("order", order)
	var h idem.Hasher
	h.String(order)
	return idem.Do(ctx, ex, &m, &k, &h, fn)
}

// A door, a wrapper and the tenant: the handler passes
// c.Request().Context(), which carries the tenant idemhttp.WithTenant
// named, to a generated wrapper on a SingleTenant executor, and returns its
// error. Two tenants paying their own order 1 are two payments.
func Example_tenantToWrapper() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	e := echo.New()
	e.Use(idemecho.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") })))
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		receipt, err := payOrder(c.Request().Context(), ex, c.Param("id"), func(ctx context.Context) (string, error) {
			tenant, _ := idem.TenantFromContext(ctx)
			return "paid by " + tenant, nil
		})
		if err != nil {
			return err // a refusal of the wrapper is answered by idemhttp.WriteError
		}
		return c.String(http.StatusOK, receipt)
	})
	for _, p := range [][2]string{{"acme", "k1"}, {"globex", "k2"}, {"globex", "k3"}} {
		r := httptest.NewRequest("POST", "/orders/1/pay", strings.NewReader(`{}`))
		r.Header.Set("X-Account", p[0])
		r.Header.Set("Idempotency-Key", p[1])
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%s %s: %d %s by=%q\n", p[0], p[1], w.Code, w.Body, w.Header().Get(idemhttp.ReplayedByHeader))
	}
	// Output:
	// acme k1: 200 paid by acme by=""
	// globex k2: 200 paid by globex by=""
	// globex k3: 200 paid by globex by="business-key"
}
