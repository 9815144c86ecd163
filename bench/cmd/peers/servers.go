package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	redisstorage "github.com/gofiber/storage/redis/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/benchcmp"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// The endpoint every peer serves: POST /orders with a small JSON order; the
// handler inserts one row into its own copy of the orders table (the same
// statement for every peer) and answers 201 with the order as JSON and a
// Location header.

type orderIn struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type orderOut struct {
	ID       int64  `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

const ordersDDL = `CREATE TABLE IF NOT EXISTS %s (
	id bigserial PRIMARY KEY,
	idem_key text UNIQUE,
	customer text NOT NULL,
	amount bigint NOT NULL,
	currency text NOT NULL)`

// runs counts handler executions per key while probing (off under load).
var runs = struct {
	on atomic.Bool
	mu sync.Mutex
	m  map[string]int
}{m: map[string]int{}}

func countRun(key string) {
	if !runs.on.Load() {
		return
	}
	runs.mu.Lock()
	runs.m[key]++
	runs.mu.Unlock()
}

// business is the handler's work, shared by all peers.
type business struct {
	pool  *pgxpool.Pool
	table string
}

func (b *business) migrate(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, fmt.Sprintf(ordersDDL, b.table))
	return err
}

func (b *business) insertSQL() string {
	return "INSERT INTO " + b.table + " (idem_key, customer, amount, currency) VALUES ($1, $2, $3, $4) RETURNING id"
}

// place parses the order, inserts it and returns the response body.
func (b *business) place(ctx context.Context, key string, body []byte) ([]byte, error) {
	countRun(key)
	var in orderIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	var id int64
	if err := b.pool.QueryRow(ctx, b.insertSQL(), key, in.Customer, in.Amount, in.Currency).Scan(&id); err != nil {
		return nil, err
	}
	return json.Marshal(orderOut{ID: id, Customer: in.Customer, Amount: in.Amount, Currency: in.Currency, Status: "created"})
}

func (b *business) httpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := b.place(r.Context(), r.Header.Get("Idempotency-Key"), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+strconv.Itoa(len(out)))
		w.WriteHeader(http.StatusCreated)
		w.Write(out)
	})
}

func (b *business) fiberHandler(c fiber.Ctx) error {
	out, err := b.place(c.Context(), c.Get("Idempotency-Key"), c.Body())
	if err != nil {
		return err
	}
	c.Set("Content-Type", "application/json")
	c.Set("Location", "/orders/"+strconv.Itoa(len(out)))
	return c.Status(http.StatusCreated).Send(out)
}

// server is one peer on a loopback listener.
type server struct {
	name  string
	url   string
	rtt   *benchcmp.RedisCounter
	close func()
	// notes say what the peer does not check.
	replays bool
}

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func newRedis(addr string) (*redis.Client, *benchcmp.RedisCounter) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32, MinIdleConns: 16})
	h := &benchcmp.RedisCounter{}
	c.AddHook(h)
	return c, h
}

func serveHTTP(name string, h http.Handler, rtt *benchcmp.RedisCounter, closers ...func()) (*server, error) {
	ln, err := listen()
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return &server{name: name, url: "http://" + ln.Addr().String() + "/orders", rtt: rtt, close: func() {
		_ = srv.Close()
		for _, c := range closers {
			c()
		}
	}}, nil
}

func serveFiber(name string, app *fiber.App, rtt *benchcmp.RedisCounter, closers ...func()) (*server, error) {
	ln, err := listen()
	if err != nil {
		return nil, err
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	return &server{name: name, url: "http://" + ln.Addr().String() + "/orders", rtt: rtt, close: func() {
		_ = app.ShutdownWithTimeout(2 * time.Second) // keep-alive clients may hold connections open
		for _, c := range closers {
			c()
		}
	}}, nil
}

// newIdemhttp: runtime/idemhttp on redisstore.
func newIdemhttp(ctx context.Context, pool *pgxpool.Pool, addr string) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_idemhttp"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	rc, rtt := newRedis(addr)
	ex := idem.NewExecutor(redisstore.New(rc, redisstore.WithPrefix("peer-idemhttp:")), idem.SingleTenant())
	mux := http.NewServeMux()
	mux.Handle("POST /orders", b.httpHandler())
	// SingleTenant: the benchmark's clients send no credentials, and no peer
	// scopes keys by client; the operation still scopes them.
	s, err := serveHTTP("idemhttp (redisstore)", idemhttp.New(ex, idemhttp.SingleTenant())(mux), rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}

// newIdemfiber: runtime/idemfiber on redisstore, on the same Fiber app
// and handler as newFiber: the same fasthttp stack, the same Redis.
func newIdemfiber(ctx context.Context, pool *pgxpool.Pool, addr string) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_idemfiber"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	rc, rtt := newRedis(addr)
	ex := idem.NewExecutor(redisstore.New(rc, redisstore.WithPrefix("peer-idemfiber:")), idem.SingleTenant())
	app := fiber.New()
	app.Use(idemfiber.New(ex, idemhttp.SingleTenant()))
	app.Post("/orders", b.fiberHandler)
	s, err := serveFiber("idemfiber (redisstore)", app, rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}

// newFiber: Fiber v3's idempotency middleware with gofiber/storage/redis.
func newFiber(ctx context.Context, pool *pgxpool.Pool, addr string) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_fiber"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	rc, rtt := newRedis(addr)
	app := fiber.New()
	app.Use(idempotency.New(idempotency.Config{
		Storage:   redisstorage.NewFromConnection(rc),
		KeyHeader: "Idempotency-Key",
		Lifetime:  24 * time.Hour,
	}))
	app.Post("/orders", b.fiberHandler)
	s, err := serveFiber("Fiber v3.1.0 idempotency (storage/redis)", app, rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}

// inHouse is the typical hand-written idempotency: SET NX PX a
// "processing" marker in Redis; the business INSERT carries the key under a
// unique index (ON CONFLICT DO NOTHING: a duplicate that got past Redis
// reads the existing row instead); the response is then SET in Redis for
// replays. A duplicate that finds the marker gets 409, or the stored response.
type inHouse struct {
	b  *business
	rc *redis.Client
}

type storedResponse struct {
	Status int    `json:"s"`
	Body   []byte `json:"b"`
}

func (h *inHouse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	rk := "peer-inhouse:" + key
	ok, err := h.rc.SetNX(ctx, rk, "processing", 30*time.Second).Result()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !ok {
		v, err := h.rc.Get(ctx, rk).Bytes()
		if err != nil || string(v) == "processing" {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in progress", http.StatusConflict)
			return
		}
		var sr storedResponse
		if err := json.Unmarshal(v, &sr); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(sr.Status)
		w.Write(sr.Body)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		h.rc.Del(ctx, rk)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in orderIn
	if err := json.Unmarshal(body, &in); err != nil {
		h.rc.Del(ctx, rk)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	countRun(key)
	var id int64
	err = h.b.pool.QueryRow(ctx, "INSERT INTO "+h.b.table+" (idem_key, customer, amount, currency) VALUES ($1, $2, $3, $4) "+
		"ON CONFLICT (idem_key) DO NOTHING RETURNING id", key, in.Customer, in.Amount, in.Currency).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) { // the unique index caught a duplicate Redis let through
		err = h.b.pool.QueryRow(ctx, "SELECT id FROM "+h.b.table+" WHERE idem_key = $1", key).Scan(&id)
	}
	if err != nil {
		h.rc.Del(ctx, rk)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out, _ := json.Marshal(orderOut{ID: id, Customer: in.Customer, Amount: in.Amount, Currency: in.Currency, Status: "created"})
	stored, _ := json.Marshal(storedResponse{Status: http.StatusCreated, Body: out})
	_ = h.rc.Set(ctx, rk, stored, 24*time.Hour).Err()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

func newInHouse(ctx context.Context, pool *pgxpool.Pool, addr string) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_inhouse"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	rc, rtt := newRedis(addr)
	mux := http.NewServeMux()
	mux.Handle("POST /orders", &inHouse{b: b, rc: rc})
	s, err := serveHTTP("in-house SETNX + unique index", mux, rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}

// newBareHTTP and newBareFiber serve the endpoint with no idempotency: the
// floor of each HTTP stack.
func newBareHTTP(ctx context.Context, pool *pgxpool.Pool) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_bare_http"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", b.httpHandler())
	return serveHTTP("net/http, no idempotency", mux, nil)
}

func newBareFiber(ctx context.Context, pool *pgxpool.Pool) (*server, error) {
	b := &business{pool: pool, table: "peer_orders_bare_fiber"}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	app := fiber.New()
	app.Post("/orders", b.fiberHandler)
	return serveFiber("Fiber, no idempotency", app, nil)
}

// replayFloorBody is what the replay floors store and answer: an order as
// the business answers one.
var replayFloorBody = []byte(`{"id":1,"customer":"c-42","amount":4250,"currency":"EUR","status":"created"}`)

// newReplayFloorHTTP and newReplayFloorFiber are the floor of a replay on
// each HTTP stack: one Redis GET of the key and the stored body written
// back (a first request, which the replay benchmark only uses to seed its
// keys, SETs it). No payload comparison, no claim, no scope: what is left
// of a replay when every check is taken out. idemhttp's replay against the
// net/http floor is what its checks and its store cost; the net/http floor
// against Fiber's is what the HTTP stack costs.
func newReplayFloorHTTP(addr string) (*server, error) {
	rc, rtt := newRedis(addr)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		rk := "peer-floor-http:" + r.Header.Get("Idempotency-Key")
		v, err := rc.Get(ctx, rk).Bytes()
		if errors.Is(err, redis.Nil) {
			v, err = replayFloorBody, rc.Set(ctx, rk, replayFloorBody, time.Hour).Err()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(v)
	})
	s, err := serveHTTP("net/http replay floor (GET + write)", mux, rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}

func newReplayFloorFiber(addr string) (*server, error) {
	rc, rtt := newRedis(addr)
	app := fiber.New()
	app.Post("/orders", func(c fiber.Ctx) error {
		rk := "peer-floor-fiber:" + c.Get("Idempotency-Key")
		v, err := rc.Get(c.Context(), rk).Bytes()
		if errors.Is(err, redis.Nil) {
			v, err = replayFloorBody, rc.Set(c.Context(), rk, replayFloorBody, time.Hour).Err()
		}
		if err != nil {
			return err
		}
		c.Set("Content-Type", "application/json")
		return c.Status(http.StatusCreated).Send(v)
	})
	s, err := serveFiber("Fiber replay floor (GET + write)", app, rtt, func() { _ = rc.Close() })
	if s != nil {
		s.replays = true
	}
	return s, err
}
