package idemfiber_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// app is a Fiber app with idemfiber on memstore, the handlers' runs and
// the operations the middleware named.
type app struct {
	url  string
	ex   *idem.Executor
	runs atomic.Int64
	mu   sync.Mutex
	ops  []string
}

func newApp(t *testing.T, routes func(f *fiber.App, a *app, opts ...idemhttp.Option)) *app {
	a := &app{ex: idem.NewExecutor(memstore.New(), idem.SingleTenant())}
	f := fiber.New()
	f.Use(recover.New())
	routes(f, a, idemhttp.SingleTenant(), idemhttp.WithObserver(func(ev idemhttp.Event) {
		a.mu.Lock()
		a.ops = append(a.ops, ev.Op)
		a.mu.Unlock()
	}))
	a.url = serve(t, f)
	return a
}

func (a *app) send(t *testing.T, method, path, key, body string) (idemhttptest.Response, string) {
	t.Helper()
	r := idemhttptest.Send(t, nil, method, a.url+path, key, body)
	return r, r.Body
}

// Native Fiber handlers: c.JSON with a cookie, c.SendStatus, a returned
// *fiber.Error (answered by the app's error handler: a 404 is stored and
// replayed), a returned plain error (500: released), a panic under
// Fiber's recover middleware.
func TestNativeHandlers(t *testing.T) {
	a := newApp(t, func(f *fiber.App, a *app, opts ...idemhttp.Option) {
		f.Use(idemfiber.New(a.ex, opts...))
		f.Post("/json", func(c fiber.Ctx) error {
			c.Set("Location", "/orders/1")
			c.Cookie(&fiber.Cookie{Name: "session", Value: "secret"})
			return c.Status(http.StatusCreated).JSON(fiber.Map{"run": a.runs.Add(1)})
		})
		f.Post("/stream", func(c fiber.Ctx) error {
			run := a.runs.Add(1)
			return c.Status(http.StatusCreated).SendStreamWriter(func(w *bufio.Writer) {
				fmt.Fprintf(w, "part one, ")
				_ = w.Flush()
				fmt.Fprintf(w, "part two of run %d", run)
			})
		})
		f.Post("/status", func(c fiber.Ctx) error {
			a.runs.Add(1)
			return c.SendStatus(http.StatusAccepted)
		})
		f.Post("/notfound", func(c fiber.Ctx) error {
			a.runs.Add(1)
			return fiber.NewError(http.StatusNotFound, "no such order")
		})
		f.Post("/fail", func(c fiber.Ctx) error {
			a.runs.Add(1)
			return errors.New("database down")
		})
		f.Post("/panic", func(c fiber.Ctx) error {
			if a.runs.Add(1) == 1 {
				panic("boom")
			}
			return c.Status(http.StatusCreated).SendString("ok")
		})
	})
	for _, tc := range []struct {
		path    string
		status  int
		body    string
		replay  bool
		status2 int
		body2   string
	}{
		{"/json", 201, `{"run":1}`, true, 201, `{"run":1}`},
		{"/stream", 201, "part one, part two of run 1", true, 201, "part one, part two of run 1"}, // read whole, then stored
		{"/status", 202, "Accepted", true, 202, "Accepted"},
		{"/notfound", 404, "no such order", true, 404, "no such order"},
		{"/fail", 500, "database down", false, 500, "database down"},
		{"/panic", 500, "boom", false, 201, "ok"},
	} {
		t.Run(tc.path[1:], func(t *testing.T) {
			a.runs.Store(0)
			key := idemhttp.GenerateKey()
			res, body := a.send(t, "POST", tc.path, key, "{}")
			if res.Status != tc.status || body != tc.body || res.Header.Get(idemhttp.ReplayedHeader) != "" {
				t.Fatalf("first: %d %q %v", res.Status, body, res.Header)
			}
			res2, body2 := a.send(t, "POST", tc.path, key, "{}")
			if res2.Status != tc.status2 || body2 != tc.body2 || (res2.Header.Get(idemhttp.ReplayedHeader) == "true") != tc.replay {
				t.Fatalf("retry: %d %q %v", res2.Status, body2, res2.Header)
			}
			want := int64(2)
			if tc.replay {
				want = 1
				if res.Header.Get("Content-Type") != res2.Header.Get("Content-Type") {
					t.Fatalf("Content-Type %q, replayed as %q", res.Header.Get("Content-Type"), res2.Header.Get("Content-Type"))
				}
				if res2.Header.Get("Set-Cookie") != "" {
					t.Fatalf("replayed a cookie: %v", res2.Header)
				}
			}
			if got := a.runs.Load(); got != want {
				t.Fatalf("handler ran %d times, want %d", got, want)
			}
		})
	}
}

// ForRoute: the operation is the method and the route's pattern; New in
// app.Use: the method and the path.
func TestOperation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		route  bool
		second int // the same key on /orders/2
		op     string
	}{
		{"ForRoute", true, 422, "POST /orders/:id"},
		{"Use", false, 201, "POST /orders/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t, func(f *fiber.App, a *app, opts ...idemhttp.Option) {
				h := func(c fiber.Ctx) error { return c.Status(201).SendString("order " + c.Params("id")) }
				if tc.route {
					f.Post("/orders/:id", idemfiber.ForRoute(a.ex, opts...), h)
				} else {
					f.Use(idemfiber.New(a.ex, opts...))
					f.Post("/orders/:id", h)
				}
			})
			key := idemhttp.GenerateKey()
			if res, body := a.send(t, "POST", "/orders/1", key, "{}"); res.Status != 201 || body != "order 1" {
				t.Fatalf("first: %d %q", res.Status, body)
			}
			if res, _ := a.send(t, "POST", "/orders/2", key, "{}"); res.Status != tc.second {
				t.Fatalf("the same key on another path of the route: %d, want %d", res.Status, tc.second)
			}
			if res, _ := a.send(t, "POST", "/orders/1", key, "{}{}"); res.Status != 422 {
				t.Fatalf("the key with another body: %d, want 422", res.Status)
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if len(a.ops) == 0 || a.ops[len(a.ops)-1] != tc.op {
				t.Fatalf("operations %q, want %q last", a.ops, tc.op)
			}
		})
	}
}

// A response stored through idemfiber replays through idemhttp on net/http
// (and the other way round): one record format.
func TestStoredAsIdemhttpStores(t *testing.T) {
	a := newApp(t, func(f *fiber.App, a *app, opts ...idemhttp.Option) {
		f.Use(idemfiber.New(a.ex, opts...))
		f.Post("/orders", func(c fiber.Ctx) error {
			c.Set("Location", "/orders/1")
			return c.Status(201).JSON(fiber.Map{"run": a.runs.Add(1)})
		})
	})
	key := idemhttp.GenerateKey()
	first, body := a.send(t, "POST", "/orders", key, "{}")
	h := idemhttp.New(a.ex, idemhttp.SingleTenant())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the net/http handler ran: the stored response was not found")
	}))
	req, _ := http.NewRequest("POST", "/orders", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, key)
	w := &recorder{header: http.Header{}}
	h.ServeHTTP(w, req)
	if w.status != first.Status || w.body.String() != body || w.header.Get("Location") != "/orders/1" ||
		w.header.Get("Content-Type") != first.Header.Get("Content-Type") || w.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("net/http replay %d %q %v; Fiber answered %d %q %v", w.status, w.body.String(), w.header, first.Status, body, first.Header)
	}
}

type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.status = code }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }

// TestHijackNotStored: a Fiber handler that hijacks the connection (the
// fasthttp way) answers on it itself; Fiber's response (an empty 200) is
// not stored and the key is released, as idemhttp does on net/http: the
// retry runs again, and no client ever gets an empty 200 or a replay.
func TestHijackNotStored(t *testing.T) {
	a := newApp(t, func(f *fiber.App, a *app, opts ...idemhttp.Option) {
		f.Use(idemfiber.New(a.ex, opts...))
		f.Post("/hijack", func(c fiber.Ctx) error {
			run := a.runs.Add(1)
			c.RequestCtx().HijackSetNoResponse(true)
			c.RequestCtx().Hijack(func(conn net.Conn) {
				body := fmt.Sprintf("run %d", run)
				fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			})
			return nil
		})
	})
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	key := idemhttp.GenerateKey()
	for run := 1; run <= 2; run++ {
		r := idemhttptest.Send(t, c, "POST", a.url+"/hijack", key, "{}")
		if r.Status != http.StatusCreated || r.Body != fmt.Sprintf("run %d", run) || r.Header.Get(idemhttp.ReplayedHeader) != "" {
			t.Fatalf("request %d: %d %q %v; want the hijacking handler's own answer, run %d", run, r.Status, r.Body, r.Header, run)
		}
	}
	if n := a.runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2 (a hijacked response is not stored)", n)
	}
}
