package idemecho_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// app is an echo instance behind idemecho on memstore, with its handlers'
// runs and the operations the middleware named.
type app struct {
	srv  *httptest.Server
	runs atomic.Int64
	mu   sync.Mutex
	ops  []string
}

func newApp(t *testing.T, routes func(e *echo.Echo, a *app)) *app {
	a := &app{}
	e := newEcho()
	e.Use(idemecho.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()),
		idemhttp.SingleTenant(), idemhttp.WithObserver(func(ev idemhttp.Event) {
			a.mu.Lock()
			a.ops = append(a.ops, ev.Op)
			a.mu.Unlock()
		})))
	routes(e, a)
	a.srv = httptest.NewServer(e)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) send(t *testing.T, method, path, key, body string) (idemhttptest.Response, string) {
	t.Helper()
	r := idemhttptest.Send(t, nil, method, a.srv.URL+path, key, body)
	return r, r.Body
}

// Native echo handlers: c.JSON, c.NoContent, a returned *echo.HTTPError
// (answered by echo's error handler: a 404 is stored and replayed), a
// returned plain error (500: released), a panic under echo's Recover.
func TestNativeHandlers(t *testing.T) {
	a := newApp(t, func(e *echo.Echo, a *app) {
		e.POST("/json", func(c echo.Context) error {
			c.Response().Header().Set("Location", "/orders/1")
			return c.JSON(http.StatusCreated, map[string]int64{"run": a.runs.Add(1)})
		})
		e.POST("/nocontent", func(c echo.Context) error {
			a.runs.Add(1)
			return c.NoContent(http.StatusNoContent)
		})
		e.POST("/notfound", func(c echo.Context) error {
			return echo.NewHTTPError(http.StatusNotFound, "no such order, run "+string(rune('0'+a.runs.Add(1))))
		})
		e.POST("/fail", func(c echo.Context) error {
			a.runs.Add(1)
			return errors.New("database down")
		})
		e.POST("/panic", func(c echo.Context) error {
			if a.runs.Add(1) == 1 {
				panic("boom")
			}
			return c.String(http.StatusCreated, "ok")
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
		{"/json", 201, `{"run":1}` + "\n", true, 201, `{"run":1}` + "\n"},
		{"/nocontent", 204, "", true, 204, ""},
		{"/notfound", 404, `{"message":"no such order, run 1"}` + "\n", true, 404, `{"message":"no such order, run 1"}` + "\n"},
		{"/fail", 500, `{"message":"Internal Server Error"}` + "\n", false, 500, `{"message":"Internal Server Error"}` + "\n"},
		{"/panic", 500, `{"message":"Internal Server Error"}` + "\n", false, 201, "ok"},
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
			}
			if got := a.runs.Load(); got != want {
				t.Fatalf("handler ran %d times, want %d", got, want)
			}
		})
	}
}

// The operation is the method and echo's route; a request the middleware
// passes through returns its handler's error to echo as usual.
func TestRoutePatternIsTheOperation(t *testing.T) {
	a := newApp(t, func(e *echo.Echo, a *app) {
		e.POST("/orders/:id", func(c echo.Context) error {
			return c.String(http.StatusCreated, "order "+c.Param("id"))
		})
		e.GET("/orders/:id", func(c echo.Context) error {
			return echo.NewHTTPError(http.StatusTeapot)
		})
	})
	key := idemhttp.GenerateKey()
	if res, body := a.send(t, "POST", "/orders/1", key, "{}"); res.Status != 201 || body != "order 1" {
		t.Fatalf("first: %d %q", res.Status, body)
	}
	if res, _ := a.send(t, "POST", "/orders/2", key, "{}"); res.Status != 422 {
		t.Fatalf("the same key on another path of the route: %d, want 422", res.Status)
	}
	if res, _ := a.send(t, "GET", "/orders/2", "", ""); res.Status != http.StatusTeapot {
		t.Fatalf("GET passed through: %d, want 418", res.Status)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ops) == 0 {
		t.Fatal("no event named an operation")
	}
	for _, op := range a.ops {
		if op != "POST /orders/:id" {
			t.Fatalf("operations %q, want POST /orders/:id", a.ops)
		}
	}
}
