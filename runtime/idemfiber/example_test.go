package idemfiber_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gofiber/fiber/v3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func ExampleNew() {
	orders := 0
	app := fiber.New()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	app.Use(idemfiber.New(ex,
		// Scope keys by the authenticated caller (required: WithTenant or
		// SingleTenant).
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") })))
	app.Post("/orders", func(c fiber.Ctx) error {
		orders++
		return c.Status(http.StatusCreated).JSON(fiber.Map{"order": orders})
	})

	for _, body := range []string{`{"item":"book"}`, `{"item":"book"}`, `{"item":"pen"}`} {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
		req.Header.Set("X-Account", "acct_1")
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.SplitN(string(b), ",", 2)[0])
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 422 replayed="" {"type":"https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#key-reused"
	// orders created: 1
}

// ForRoute on one route: the operation is the route's pattern, so one key
// sent to two orders of the route is a key reused (422).
func ExampleForRoute() {
	app := fiber.New()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	app.Post("/orders/:id/pay", idemfiber.ForRoute(ex, idemhttp.SingleTenant()), func(c fiber.Ctx) error {
		return c.SendString("paid order " + c.Params("id"))
	})
	for _, path := range []string{"/orders/1/pay", "/orders/2/pay"} {
		req := httptest.NewRequest("POST", path, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.SplitN(string(b), ",", 2)[0])
	}
	// Output:
	// 200 paid order 1
	// 422 {"type":"https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#key-reused"
}
