package idemecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestNativeTenantsApart: a native echo handler passes
// c.Request().Context() to a wrapped method on a single-tenant executor,
// and returns its error: the door's tenant scopes the method's record, and
// the method's refusals are answered by the business key's rules.
func TestNativeTenantsApart(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	orders := &idemhttptest.Orders{Executor: ex}
	e := newEcho()
	e.Use(idemecho.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Tenant") })))
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		amount, err := strconv.Atoi(c.QueryParam("amount"))
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		receipt, err := orders.Pay(c.Request().Context(), c.Param("id"), amount)
		if err != nil {
			return err
		}
		return c.String(http.StatusOK, receipt)
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	idemhttptest.CheckTenantsApart(t, orders, func(order string, amount int) string {
		return fmt.Sprintf("%s/orders/%s/pay?amount=%d", srv.URL, order, amount)
	})
}
