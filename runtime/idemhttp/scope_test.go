package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func testOperationScope(t *testing.T, newStore newStoreFunc) {
	e := &env{t: t}
	e.ex = idem.NewExecutor(newStore(t), idem.SingleTenant())
	mux := http.NewServeMux()
	count := func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, r.Pattern)
	}
	mux.HandleFunc("POST /orders/{id}/pay", count)
	mux.HandleFunc("POST /orders/{id}/refund", count)
	var ops []string
	var mu sync.Mutex
	obs := idemhttp.WithObserver(func(ev idemhttp.Event) { mu.Lock(); ops = append(ops, ev.Op); mu.Unlock() })
	// Wrapping the whole mux: the middleware asks the mux for the pattern.
	e.h = idemhttp.New(e.ex, idemhttp.SingleTenant(), obs)(mux)
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders/1/pay", key, "{}"), 201)
	wantStatus(t, e.do("POST", "/orders/1/refund", key, "{}"), 201) // another operation
	e.wantRuns(2)
	// Same route, another order: same operation, another path: 422.
	wantProblem(t, e.do("POST", "/orders/2/pay", key, "{}"), 422, "key-reused")
	wantReplayed(t, e.do("POST", "/orders/1/pay", key, "{}").Header(), true)
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != 2 || ops[0] != "POST /orders/{id}/pay" || ops[1] != "POST /orders/{id}/pay" {
		t.Fatalf("operations %q", ops)
	}

	// Wrapping one route: r.Pattern is set.
	mux2 := http.NewServeMux()
	var op2 string
	mux2.Handle("/items/{id}", idemhttp.New(e.ex, idemhttp.SingleTenant(), idemhttp.WithObserver(func(ev idemhttp.Event) { op2 = ev.Op }))(http.HandlerFunc(count)))
	w := httptest.NewRecorder()
	r := httptest.NewRequest("PATCH", "/items/7", strings.NewReader("{}"))
	r.Header.Set(idemhttp.Header, key)
	mux2.ServeHTTP(w, r)
	mux2.ServeHTTP(httptest.NewRecorder(), r.Clone(context.Background()))
	if op2 != "PATCH /items/{id}" {
		t.Fatalf("operation %q", op2)
	}
}

// TestOperationScope checks the operation a ServeMux pattern names on every store (onEveryStore).
func TestOperationScope(t *testing.T) { onEveryStore(t, testOperationScope) }
