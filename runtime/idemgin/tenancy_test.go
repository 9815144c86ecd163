package idemgin_test

import (
	"context"
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
// key's rules. Passing gin's c itself, the newcomer's habit (a
// *gin.Context is a context.Context), does the same, with or without
// gin.Engine.ContextWithFallback: before, c carried none of the door's
// values without the fallback, and a single-tenant executor answered
// globex with acme's receipt.
func TestNativeTenantsApart(t *testing.T) {
	for _, c := range []struct {
		name     string
		fallback bool
		ctx      func(*gin.Context) context.Context
	}{
		{"c.Request.Context()", false, func(c *gin.Context) context.Context { return c.Request.Context() }},
		{"c", false, func(c *gin.Context) context.Context { return c }},
		{"c with ContextWithFallback", true, func(c *gin.Context) context.Context { return c }},
	} {
		t.Run(c.name, func(t *testing.T) { testNativeTenantsApart(t, c.fallback, c.ctx) })
	}
}

func testNativeTenantsApart(t *testing.T, fallback bool, ctxOf func(*gin.Context) context.Context) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	orders := &idemhttptest.Orders{Executor: ex}
	r := gin.New()
	r.ContextWithFallback = fallback
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Tenant") })))
	r.POST("/orders/:id/pay", func(c *gin.Context) {
		amount, err := strconv.Atoi(c.Query("amount"))
		if err != nil {
			c.String(http.StatusBadRequest, err.Error())
			return
		}
		receipt, err := orders.Pay(ctxOf(c), c.Param("id"), amount)
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
