package idemfiber_test

import (
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// BenchmarkReplay measures a replay through idemfiber on memstore, in
// process (Fiber's handler called with a fasthttp request, no network),
// against the same Fiber app without the middleware answering the same
// response ("bare"): the adapter's and idemhttp's CPU cost per replay,
// without a store's round trip.
func BenchmarkReplay(b *testing.B) {
	handler := func(c fiber.Ctx) error {
		c.Set("Location", "/orders/1")
		return c.Status(201).JSON(fiber.Map{"id": 1, "customer": "c-42", "amount": 4250, "currency": "EUR", "status": "created"})
	}
	for _, mw := range []bool{true, false} {
		name := "bare"
		app := fiber.New()
		if mw {
			name = "idemfiber"
			app.Use(idemfiber.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemhttp.SingleTenant()))
		}
		app.Post("/orders", handler)
		h := app.Handler()
		b.Run(name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			send := func() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI("/orders")
				ctx.Request.Header.Set("Content-Type", "application/json")
				ctx.Request.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
				ctx.Request.SetBodyString(`{"customer":"c-42","amount":4250,"currency":"EUR"}`)
				h(&ctx)
				if ctx.Response.StatusCode() != 201 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			send()
			b.ReportAllocs()
			for b.Loop() {
				send()
			}
		})
	}
}
