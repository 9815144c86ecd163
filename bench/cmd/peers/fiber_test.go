package main

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	redisstorage "github.com/gofiber/storage/redis/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/idemgen/idemgen/internal/benchcmp"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// fiberPeer is one Fiber app with one idempotency middleware, served in
// process (no network between client and app: the fasthttp handler is
// called directly), on its own counted Redis client.
type fiberPeer struct {
	name    string
	handler fasthttp.RequestHandler
	rtt     *benchcmp.RedisCounter
}

// fiberPeers builds idemfiber and Fiber's idempotency middleware on one
// Redis, each in front of the same handler: the order answer of cmd/peers
// without its INSERT, so that what is measured is the middleware and its
// store.
func fiberPeers(tb testing.TB) []fiberPeer {
	addr := testenv.RedisAddr(tb)
	handler := func(c fiber.Ctx) error {
		c.Set("Content-Type", "application/json")
		c.Set("Location", "/orders/1")
		return c.Status(201).Send(replayFloorBody)
	}
	client := func() (*redis.Client, *benchcmp.RedisCounter) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		h := &benchcmp.RedisCounter{}
		c.AddHook(h)
		tb.Cleanup(func() { _ = c.Close() })
		return c, h
	}
	rc, rtt := client()
	idemApp := fiber.New()
	idemApp.Use(idemfiber.New(idem.NewExecutor(redisstore.New(rc, redisstore.WithPrefix("bench-idemfiber:")), idem.SingleTenant()), idemhttp.SingleTenant()))
	idemApp.Post("/orders", handler)
	fc, frtt := client()
	fiberApp := fiber.New()
	fiberApp.Use(idempotency.New(idempotency.Config{
		Storage:   redisstorage.NewFromConnection(fc),
		KeyHeader: "Idempotency-Key",
		Lifetime:  24 * time.Hour,
	}))
	fiberApp.Post("/orders", handler)
	return []fiberPeer{
		{"idemfiber", idemApp.Handler(), rtt},
		{"fiber", fiberApp.Handler(), frtt},
	}
}

// fiberMemPeers is fiberPeers on each middleware's in-memory store
// (memstore; Fiber's default storage): what each costs without a store
// round trip.
func fiberMemPeers() []fiberPeer {
	handler := func(c fiber.Ctx) error {
		c.Set("Content-Type", "application/json")
		c.Set("Location", "/orders/1")
		return c.Status(201).Send(replayFloorBody)
	}
	idemApp := fiber.New()
	idemApp.Use(idemfiber.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemhttp.SingleTenant()))
	idemApp.Post("/orders", handler)
	fiberApp := fiber.New()
	fiberApp.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: 24 * time.Hour}))
	fiberApp.Post("/orders", handler)
	return []fiberPeer{
		{"idemfiber", idemApp.Handler(), nil},
		{"fiber", fiberApp.Handler(), nil},
	}
}

// send posts the order with key to h on ctx (reset first) and checks the
// answer.
func send(tb testing.TB, ctx *fasthttp.RequestCtx, h fasthttp.RequestHandler, key string) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/orders")
	ctx.Request.Header.Set("Content-Type", "application/json")
	ctx.Request.Header.Set("Idempotency-Key", key)
	ctx.Request.SetBody(body)
	h(ctx)
	if ctx.Response.StatusCode() != 201 {
		tb.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// BenchmarkFiberPeers runs replays and first requests through each peer
// in its own sub-benchmark, for profiles of one peer at a time
// (-cpuprofile, -memprofile), reporting Redis round trips per request.
//
//	cd bench && IDEM_REDIS_ADDR=… go test -run '^$' -bench FiberPeers/replay/idemfiber -cpuprofile cpu.out ./cmd/peers
func BenchmarkFiberPeers(b *testing.B) {
	b.Run("redis", func(b *testing.B) { peerBenchmarks(b, fiberPeers(b)) })
	b.Run("memory", func(b *testing.B) { peerBenchmarks(b, fiberMemPeers()) })
}

func peerBenchmarks(b *testing.B, peers []fiberPeer) {
	for _, p := range peers {
		b.Run("replay/"+p.name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = uuid.NewString()
				send(b, &ctx, p.handler, keys[i])
			}
			var before int64
			if p.rtt != nil {
				before = p.rtt.Load()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				send(b, &ctx, p.handler, keys[i%len(keys)])
			}
			if p.rtt != nil {
				b.ReportMetric(float64(p.rtt.Load()-before)/float64(b.N), "rtt/op")
			}
		})
		b.Run("first/"+p.name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			var before int64
			if p.rtt != nil {
				before = p.rtt.Load()
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				key := uuid.NewString()
				b.StartTimer()
				send(b, &ctx, p.handler, key)
			}
			if p.rtt != nil {
				b.ReportMetric(float64(p.rtt.Load()-before)/float64(b.N), "rtt/op")
			}
		})
	}
}

// BenchmarkFiberInterleaved alternates idemfiber and Fiber's middleware
// request by request (which goes first alternating too) and reports
// Fiber's time ÷ idemfiber's: above 1, idemfiber is faster.
func BenchmarkFiberInterleaved(b *testing.B) {
	b.Run("redis", func(b *testing.B) { interleave(b, fiberPeers(b)) })
	b.Run("memory", func(b *testing.B) { interleave(b, fiberMemPeers()) })
}

func interleave(b *testing.B, peers []fiberPeer) {
	for _, kind := range []string{"replay", "first"} {
		b.Run(kind, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = uuid.NewString()
				if kind == "replay" {
					for _, p := range peers {
						send(b, &ctx, p.handler, keys[i])
					}
				}
			}
			var spent [2]time.Duration
			for i := 0; b.Loop(); i++ {
				if kind == "first" && i%len(keys) == 0 {
					for j := range keys {
						keys[j] = uuid.NewString()
					}
				}
				key := keys[i%len(keys)]
				for j := range 2 {
					k := (i + j) % 2
					t0 := time.Now()
					send(b, &ctx, peers[k].handler, key)
					spent[k] += time.Since(t0)
				}
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "idemfiber-ns")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "fiber-ns")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "speed")
			b.ReportMetric(0, "ns/op")
		})
	}
}
