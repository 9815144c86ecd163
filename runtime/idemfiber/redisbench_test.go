package idemfiber_test

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// BenchmarkRedisReplay measures a replay through idemfiber on redisstore,
// in process (no HTTP network), against its floor on the same Fiber stack:
// one GET of a stored body and that body written back, with no check.
// Interleaved per iteration; it reports each one's mean time and
// replay/floor.
func BenchmarkRedisReplay(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	b.Cleanup(func() { _ = c.Close() })
	key := idemhttp.GenerateKey()
	floorKey := "idemfiber-bench-floor:" + key
	if err := c.Set(b.Context(), floorKey, `{"id":1,"customer":"c-42","amount":4250,"currency":"EUR","status":"created"}`, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	mwApp := fiber.New()
	mwApp.Use(idemfiber.New(idem.NewExecutor(redisstore.New(c, redisstore.WithPrefix("idemfiber-bench:")), idem.SingleTenant()), idemhttp.SingleTenant()))
	mwApp.Post("/orders", func(c fiber.Ctx) error {
		c.Set("Location", "/orders/1")
		return c.Status(201).JSON(fiber.Map{"id": 1, "customer": "c-42", "amount": 4250, "currency": "EUR", "status": "created"})
	})
	floorApp := fiber.New()
	floorApp.Post("/orders", func(fc fiber.Ctx) error {
		v, err := c.Get(fc.Context(), floorKey).Bytes()
		if err != nil {
			return err
		}
		fc.Set("Content-Type", "application/json")
		fc.Set("Location", "/orders/1")
		return fc.Status(201).Send(v)
	})
	var ctx fasthttp.RequestCtx
	send := func(h fasthttp.RequestHandler) {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/orders")
		ctx.Request.Header.Set("Content-Type", "application/json")
		ctx.Request.Header.Set("Idempotency-Key", key)
		ctx.Request.SetBodyString(`{"customer":"c-42","amount":4250,"currency":"EUR"}`)
		h(&ctx)
		if ctx.Response.StatusCode() != 201 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	mw, floor := mwApp.Handler(), floorApp.Handler()
	send(mw) // the first request: stored
	b.ReportAllocs()
	var floors, replays time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if i%2 == 0 {
			send(floor)
		} else {
			send(mw)
		}
		t1 := time.Now()
		if i%2 == 0 {
			send(mw)
		} else {
			send(floor)
		}
		t2 := time.Now()
		if i%2 == 0 {
			floors, replays = floors+t1.Sub(t0), replays+t2.Sub(t1)
		} else {
			replays, floors = replays+t1.Sub(t0), floors+t2.Sub(t1)
		}
	}
	b.ReportMetric(float64(floors.Nanoseconds())/float64(b.N), "floor-ns")
	b.ReportMetric(float64(replays.Nanoseconds())/float64(b.N), "replay-ns")
	b.ReportMetric(float64(replays)/float64(floors), "replay/floor")
	b.ReportMetric(0, "ns/op")
}
