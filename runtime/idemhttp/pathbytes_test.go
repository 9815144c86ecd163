package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// testPathBytes sends paths that decode to bytes no text column takes (NUL,
// invalid UTF-8) and paths too long for an operation, to a handler without
// a mux pattern: the operation is the path. Each is answered for what it is,
// never with 503 "retry" for a request that can never succeed.
func testPathBytes(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	for _, c := range []struct{ target, op string }{
		{"/orders/%FF", "POST /orders/%FF"},
		{"/orders/%00", "POST /orders/%00"},
		{"/orders/%FF%00%C3%28", "POST /orders/%FF%00%C3%28"},
		{"/orders/%25FF", "POST /orders/%25FF"}, // a literal "%FF": another path
		{"/orders/caf%C3%A9", "POST /orders/caf%C3%A9"},
		{"/orders/" + strings.Repeat("a", idem.MaxOpLen-len("POST /orders/")), ""}, // at the limit
	} {
		t.Run(c.op, func(t *testing.T) {
			key := idemhttp.GenerateKey()
			runs := e.runs.Load()
			first := e.do("POST", c.target, key, "{}")
			wantStatus(t, first, 201)
			second := e.do("POST", c.target, key, "{}")
			wantStatus(t, second, 201)
			wantReplayed(t, second.Header(), true)
			if got := e.runs.Load() - runs; got != 1 {
				t.Fatalf("handler ran %d times, want 1", got)
			}
			if c.op == "" {
				return
			}
			evs := e.events(idemhttp.EventReplayed)
			if op := evs[len(evs)-1].Op; op != c.op {
				t.Fatalf("operation %q, want %q", op, c.op)
			}
		})
	}
	// One byte over the limit, and 4 kB: 414, every time.
	for _, n := range []int{idem.MaxOpLen - len("POST /orders/") + 1, 4096} {
		runs := e.runs.Load()
		target := "/orders/" + strings.Repeat("a", n)
		key := idemhttp.GenerateKey()
		for range 2 {
			p := wantProblem(t, e.do("POST", target, key, "{}"), 414, "scope-too-long")
			if !strings.Contains(p.Detail, "operation") {
				t.Errorf("detail %q does not name the operation", p.Detail)
			}
		}
		if e.runs.Load() != runs {
			t.Fatalf("a %d-byte path ran the handler", n)
		}
	}
	if n := len(e.events(idemhttp.EventScopeTooLong)); n != 4 {
		t.Fatalf("%d scope-too-long events, want 4", n)
	}

	// Under a mux pattern the operation is the route, and a 4 kB path (or
	// one with a NUL) is an ordinary request of it.
	runs := atomic.Int64{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
	})
	h := idemhttp.New(idem.NewExecutor(newStore(t), idem.SingleTenant()), idemhttp.SingleTenant())(mux)
	for _, target := range []string{"/orders/" + strings.Repeat("b", 4096), "/orders/%00%FF"} {
		key := idemhttp.GenerateKey()
		for i := range 2 {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", target, strings.NewReader("{}"))
			r.Header.Set(idemhttp.Header, key)
			h.ServeHTTP(w, r)
			wantStatus(t, w, 201)
			wantReplayed(t, w.Header(), i == 1)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("the routed handler ran %d times, want 2", runs.Load())
	}
}

// TestPathBytesAndLength checks path bytes and lengths on every store (onEveryStore).
func TestPathBytesAndLength(t *testing.T) { onEveryStore(t, testPathBytes) }
