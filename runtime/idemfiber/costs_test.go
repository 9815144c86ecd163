package idemfiber_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// commandLog is a go-redis hook that keeps the name of every command the
// client sends (a pipeline's commands one by one).
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.names = append(l.names, cmd.Name())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			l.names = append(l.names, c.Name())
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the names logged since the last take.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

// orderApp is the order endpoint of bench/cmd/peers' -fiber comparison
// without its INSERT: idemfiber on store in front of a handler that
// answers 201 JSON with a Location.
func orderApp(store idem.Store) fasthttp.RequestHandler {
	app := fiber.New()
	app.Use(idemfiber.New(idem.NewExecutor(store, idem.SingleTenant()), idemhttp.SingleTenant()))
	app.Post("/orders", func(c fiber.Ctx) error {
		c.Set("Content-Type", "application/json")
		c.Set("Location", "/orders/1")
		return c.Status(201).Send([]byte(`{"id":1,"customer":"c-42","amount":4250,"currency":"EUR","status":"created"}`))
	})
	return app.Handler()
}

// post sends the order with key to h on ctx, in process (no network), as
// a Go client sends it, and returns the status and whether it was a
// replay.
func post(ctx *fasthttp.RequestCtx, h fasthttp.RequestHandler, key string) (int, bool) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/orders")
	ctx.Request.Header.SetHost("127.0.0.1")
	ctx.Request.Header.Set("User-Agent", "Go-http-client/1.1")
	ctx.Request.Header.Set("Content-Type", "application/json")
	ctx.Request.Header.Set("Idempotency-Key", key)
	ctx.Request.Header.Set("Accept-Encoding", "gzip")
	ctx.Request.SetBodyString(`{"customer":"c-42","amount":4250,"currency":"EUR"}`)
	h(ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek(idemhttp.ReplayedHeader)) == "true"
}

// TestRedisRoundTrips pins the Redis commands of a request through
// idemfiber on redisstore: a first request is its claim (one SET … NX GET)
// and its outcome (one script), a replay one SET … NX GET that answers
// the stored record, the payload check and the claim included. Fiber's
// own middleware sends GET, GET and SET for a first request and one GET
// for a replay (bench/README.md).
func TestRedisRoundTrips(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	log := &commandLog{}
	c.AddHook(log)
	h := orderApp(redisstore.New(c, redisstore.WithPrefix("idemfiber-rtt:")))
	var ctx fasthttp.RequestCtx
	// A first request to dial the connection (HELLO, CLIENT SETINFO) and
	// load the outcome's script (EVALSHA answered NOSCRIPT, then EVAL),
	// which happen once per connection and per server.
	if st, _ := post(&ctx, h, uuid.NewString()); st != 201 {
		t.Fatalf("warm-up: %d", st)
	}
	log.take()
	for range 3 {
		key := uuid.NewString()
		if st, replayed := post(&ctx, h, key); st != 201 || replayed {
			t.Fatalf("first request: %d, replayed %v: %s", st, replayed, ctx.Response.Body())
		}
		if got := log.take(); !slices.Equal(got, []string{"set", "evalsha"}) {
			t.Fatalf("first request: commands %q, want the claim's set and the outcome's evalsha", got)
		}
		for range 2 {
			if st, replayed := post(&ctx, h, key); st != 201 || !replayed {
				t.Fatalf("replay: %d, replayed %v: %s", st, replayed, ctx.Response.Body())
			}
			if got := log.take(); !slices.Equal(got, []string{"set"}) {
				t.Fatalf("replay: commands %q, want one set", got)
			}
		}
	}
}

// memstoreOrderApp is orderApp on memstore, for the allocation pins.
func memstoreOrderApp() fasthttp.RequestHandler { return orderApp(memstore.New()) }
