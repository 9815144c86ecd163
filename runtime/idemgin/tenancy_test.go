package idemgin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestNativeTenantsApart: a native gin handler passes
// c.Request.Context() to a wrapped method on a single-tenant executor,
// and records its error with c.Error: the door's tenant scopes the
// method's record, and the method's refusals are answered by the business
// key's rules.
func TestNativeTenantsApart(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	orders := &idemhttptest.Orders{Executor: ex}
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Tenant") })))
	r.POST("/orders/:id/pay", func(c *gin.Context) {
		amount, err := strconv.Atoi(c.Query("amount"))
		if err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		receipt, err := orders.Pay(c.Request.Context(), c.Param("id"), amount)
		if err != nil {
			_ = c.Error(err)
			return
		}
		c.String(http.StatusOK, receipt)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	idemhttptest.CheckTenantsApart(t, orders, func(order string, amount int) string {
		return fmt.Sprintf("%s/orders/%s/pay?amount=%d", srv.URL, order, amount)
	})
}
