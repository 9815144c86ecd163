package idemgin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// app is a gin engine behind idemgin on memstore, with its handlers' runs
// and the operations the middleware named.
type app struct {
	srv  *httptest.Server
	runs atomic.Int64
	mu   sync.Mutex
	ops  []string
}

func newApp(t *testing.T, routes func(r *gin.Engine, a *app)) *app {
	a := &app{}
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()),
		idemhttp.SingleTenant(), idemhttp.WithObserver(func(ev idemhttp.Event) {
			a.mu.Lock()
			a.ops = append(a.ops, ev.Op)
			a.mu.Unlock()
		})))
	routes(r, a)
	a.srv = httptest.NewServer(r)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) post(t *testing.T, path, key, body string) (idemhttptest.Response, string) {
	t.Helper()
	r := idemhttptest.Send(t, nil, "POST", a.srv.URL+path, key, body)
	return r, r.Body
}

func wantRuns(t *testing.T, a *app, n int64) {
	t.Helper()
	if got := a.runs.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// Native gin handlers: c.JSON, c.Status alone (written by gin after the
// chain), c.AbortWithStatusJSON with a 5xx, a panic under gin's recovery.
func TestNativeHandlers(t *testing.T) {
	a := newApp(t, func(r *gin.Engine, a *app) {
		r.POST("/json", func(c *gin.Context) {
			c.Header("Location", "/orders/1")
			c.JSON(http.StatusCreated, gin.H{"run": a.runs.Add(1)})
		})
		r.POST("/status", func(c *gin.Context) {
			a.runs.Add(1)
			c.Status(http.StatusAccepted)
		})
		r.POST("/fail", func(c *gin.Context) {
			c.AbortWithStatusJSON(http.StatusBadGateway, gin.H{"run": a.runs.Add(1)})
		})
		r.POST("/panic", func(c *gin.Context) {
			if a.runs.Add(1) == 1 {
				panic(errors.New("boom"))
			}
			c.String(http.StatusCreated, "ok")
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
		{"/status", 202, "", true, 202, ""},
		{"/fail", 502, `{"run":1}`, false, 502, `{"run":2}`},
		{"/panic", 500, "", false, 201, "ok"},
	} {
		t.Run(tc.path[1:], func(t *testing.T) {
			a.runs.Store(0)
			key := idemhttp.GenerateKey()
			res, body := a.post(t, tc.path, key, "{}")
			if res.Status != tc.status || body != tc.body || res.Header.Get(idemhttp.ReplayedHeader) != "" {
				t.Fatalf("first: %d %q %v", res.Status, body, res.Header)
			}
			res2, body2 := a.post(t, tc.path, key, "{}")
			if res2.Status != tc.status2 || body2 != tc.body2 || (res2.Header.Get(idemhttp.ReplayedHeader) == "true") != tc.replay {
				t.Fatalf("retry: %d %q %v", res2.Status, body2, res2.Header)
			}
			if tc.replay {
				wantRuns(t, a, 1)
				if res2.Header.Get("Content-Type") != res.Header.Get("Content-Type") {
					t.Fatalf("Content-Type %q, replayed as %q", res.Header.Get("Content-Type"), res2.Header.Get("Content-Type"))
				}
			} else {
				wantRuns(t, a, 2)
			}
		})
	}
}

// The operation is the method and gin's route: one key on two paths of
// one route is one key reused with another request (422); a refusal
// aborts the chain.
func TestRoutePatternIsTheOperation(t *testing.T) {
	var after atomic.Int64
	a := newApp(t, func(r *gin.Engine, a *app) {
		r.POST("/orders/:id", func(c *gin.Context) {
			c.String(http.StatusCreated, "order %s run %d", c.Param("id"), a.runs.Add(1))
			c.Next()
		}, func(*gin.Context) { after.Add(1) })
	})
	key := idemhttp.GenerateKey()
	if res, body := a.post(t, "/orders/1", key, "{}"); res.Status != 201 || body != "order 1 run 1" {
		t.Fatalf("first: %d %q", res.Status, body)
	}
	if res, _ := a.post(t, "/orders/2", key, "{}"); res.Status != 422 {
		t.Fatalf("the same key on another path of the route: %d, want 422", res.Status)
	}
	if res, _ := a.post(t, "/orders/2", "", "{}"); res.Status != 400 {
		t.Fatalf("no key: %d, want 400", res.Status)
	}
	wantRuns(t, a, 1)
	if n := after.Load(); n != 1 {
		t.Fatalf("the handler after ran %d times, want 1 (refusals abort the chain)", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, op := range a.ops {
		if op != "POST /orders/:id" && op != "" { // "": the missing key, refused before the operation is named
			t.Fatalf("operations %q, want POST /orders/:id", a.ops)
		}
	}
}

// panic(http.ErrAbortHandler) after a flush, under gin's Recovery: the key
// is released (the retry runs), but gin's Recovery treats the abort as a
// broken connection and ends the response normally, so the client reads
// the flushed part as a complete 201 — gin's behaviour, with or without
// the middleware (docs/decisions/framework-adapters.md).
func TestAbortHandlerUnderRecovery(t *testing.T) {
	a := newApp(t, func(r *gin.Engine, a *app) {
		r.POST("/orders", func(c *gin.Context) {
			if a.runs.Add(1) == 1 {
				c.String(http.StatusCreated, "part")
				c.Writer.Flush()
				panic(http.ErrAbortHandler)
			}
			c.String(http.StatusCreated, "whole")
		})
	})
	key := idemhttp.GenerateKey()
	if res, body := a.post(t, "/orders", key, "{}"); res.Status != 201 || body != "part" || res.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("aborted: %d %q %v", res.Status, body, res.Header)
	}
	if res, body := a.post(t, "/orders", key, "{}"); res.Status != 201 || body != "whole" || res.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("retry: %d %q %v, want the handler run again", res.Status, body, res.Header)
	}
	wantRuns(t, a, 2)
}
