package idemfiber_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestNativeTenantsApart: a native Fiber handler passes c.Context() to a
// wrapped method on a single-tenant executor, and returns its error: the
// door's tenant scopes the method's record, and the method's refusals are
// answered by the business key's rules. Passing c itself, the
// newcomer's habit (a fiber.Ctx is a context.Context), does the same:
// before, c answered none of the door's values, and a single-tenant
// executor answered globex with acme's receipt.
func TestNativeTenantsApart(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  func(fiber.Ctx) context.Context
	}{
		{"c.Context()", func(c fiber.Ctx) context.Context { return c.Context() }},
		{"c", func(c fiber.Ctx) context.Context { return c }},
	} {
		t.Run(c.name, func(t *testing.T) { testNativeTenantsApart(t, c.ctx) })
	}
}

func testNativeTenantsApart(t *testing.T, ctxOf func(fiber.Ctx) context.Context) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	orders := &idemhttptest.Orders{Executor: ex}
	app := fiber.New()
	app.Post("/orders/:id/pay", idemfiber.ForRoute(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Tenant") })),
		func(c fiber.Ctx) error {
			amount, err := strconv.Atoi(c.Query("amount"))
			if err != nil {
				return fiber.NewError(fiber.StatusBadRequest, err.Error())
			}
			receipt, err := orders.Pay(ctxOf(c), c.Params("id"), amount)
			if err != nil {
				return err
			}
			return c.SendString(receipt)
		})
	url := serve(t, app)
	idemhttptest.CheckTenantsApart(t, orders, func(order string, amount int) string {
		return fmt.Sprintf("%s/orders/%s/pay?amount=%d", url, order, amount)
	})
}
