package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// derivedEnv is the middleware with WithDerivedKey(window) over a handler
// that counts its runs, on a memstore whose clock the test moves. The
// tenant is the X-Tenant request header.
type derivedEnv struct {
	elapsed atomic.Int64 // the store's clock, from start: moved by advance only
	h       http.Handler
	runs    atomic.Int64
}

func (e *derivedEnv) advance(d time.Duration) { e.elapsed.Add(int64(d)) }

func newDerivedEnv(t *testing.T, window time.Duration, opts ...idemhttp.Option) *derivedEnv {
	t.Helper()
	e := &derivedEnv{}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(e.elapsed.Load())) }
	ex := idem.NewExecutor(memstore.New(memstore.WithClock(now)), idem.SingleTenant())
	opts = append([]idemhttp.Option{
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
		idemhttp.WithDerivedKey(window),
	}, opts...)
	e.h = idemhttp.New(ex, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", n)
	}))
	return e
}

// send sends one request; hdr are name, value pairs (X-Tenant defaults
// to "acme").
func (e *derivedEnv) send(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("X-Tenant", "acme")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *derivedEnv) wantRuns(t *testing.T, n int64) {
	t.Helper()
	if got := e.runs.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// wantAnswer checks a response's status, body, and its two headers.
func wantAnswer(t *testing.T, w *httptest.ResponseRecorder, status int, body string, derived, replayed bool) {
	t.Helper()
	if w.Code != status || w.Body.String() != body {
		t.Fatalf("got %d %q, want %d %q", w.Code, w.Body.String(), status, body)
	}
	if got := w.Header().Get(idemhttp.DerivedKeyHeader) == "true"; got != derived {
		t.Fatalf("%s: %q, want derived=%v", idemhttp.DerivedKeyHeader, w.Header().Get(idemhttp.DerivedKeyHeader), derived)
	}
	if got := w.Header().Get(idemhttp.ReplayedHeader) == "true"; got != replayed {
		t.Fatalf("%s: %q, want replayed=%v", idemhttp.ReplayedHeader, w.Header().Get(idemhttp.ReplayedHeader), replayed)
	}
}

// TestDerivedKeyWindow: identical requests without a key inside the window
// run once (the window counts from the first response's storing); after
// it, the next identical request runs again, and opens a new window.
func TestDerivedKeyWindow(t *testing.T) {
	const window = 10 * time.Second
	e := newDerivedEnv(t, window)
	const body = `{"amount":100,"currency":"EUR"}`
	wantAnswer(t, e.send("POST", "/charges", body, "Content-Type", "application/json"), 201, "charge 1", true, false)
	e.advance(window - time.Millisecond)
	wantAnswer(t, e.send("POST", "/charges", body, "Content-Type", "application/json"), 201, "charge 1", true, true)
	e.wantRuns(t, 1)

	e.advance(2 * time.Millisecond) // the window has passed
	wantAnswer(t, e.send("POST", "/charges", body, "Content-Type", "application/json"), 201, "charge 2", true, false)
	e.advance(window / 2)
	wantAnswer(t, e.send("POST", "/charges", body, "Content-Type", "application/json"), 201, "charge 2", true, true)
	e.wantRuns(t, 2)
}

// TestDerivedKeyConcurrentDuplicates: identical keyless requests at once
// run the handler once; the others wait (WithWait) and get its response.
func TestDerivedKeyConcurrentDuplicates(t *testing.T) {
	e := newDerivedEnv(t, 30*time.Second, idemhttp.WithWait(time.Minute))
	var wg sync.WaitGroup
	answers := make([]*httptest.ResponseRecorder, 16)
	for i := range answers {
		wg.Go(func() { answers[i] = e.send("POST", "/charges", `{"amount":5}`, "Content-Type", "application/json") })
	}
	wg.Wait()
	e.wantRuns(t, 1)
	for _, w := range answers {
		if w.Code != 201 || w.Body.String() != "charge 1" || w.Header().Get(idemhttp.DerivedKeyHeader) != "true" {
			t.Fatalf("got %d %q %v", w.Code, w.Body.String(), w.Header())
		}
	}
}

// TestDerivedKeyTheKeyWins: a request with an Idempotency-Key is handled by
// its key alone, as without the option: its response carries no derived
// header, a keyless identical request is not answered with it (nor the
// reverse), and its key's TTL, not the window, says how long it replays.
func TestDerivedKeyTheKeyWins(t *testing.T) {
	const window = 5 * time.Second
	e := newDerivedEnv(t, window)
	const body = `{"amount":7}`
	key := idemhttp.GenerateKey()
	wantAnswer(t, e.send("POST", "/charges", body, idemhttp.Header, key), 201, "charge 1", false, false)
	wantAnswer(t, e.send("POST", "/charges", body), 201, "charge 2", true, false)
	wantAnswer(t, e.send("POST", "/charges", body, idemhttp.Header, key), 201, "charge 1", false, true)
	wantAnswer(t, e.send("POST", "/charges", body), 201, "charge 2", true, true)

	e.advance(time.Hour) // past the window, inside the key's TTL
	wantAnswer(t, e.send("POST", "/charges", body, idemhttp.Header, key), 201, "charge 1", false, true)
	wantAnswer(t, e.send("POST", "/charges", body), 201, "charge 3", true, false)
	// The key still refuses another request under it.
	if w := e.send("POST", "/charges", `{"amount":8}`, idemhttp.Header, key); w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("key reused with another body: %d, want 422", w.Code)
	}
	// An invalid key is refused, not replaced by a derived one.
	if w := e.send("POST", "/charges", body, idemhttp.Header, ""); w.Code != http.StatusBadRequest || w.Header().Get(idemhttp.DerivedKeyHeader) != "" {
		t.Fatalf("empty key: %d %v, want 400 without the derived header", w.Code, w.Header())
	}
	e.wantRuns(t, 3)
}

// TestDerivedKeyWhatIsTheSameRequest: the derived key sees the method, the
// path, the query, the media type and the body, and the tenant; it ignores
// how a JSON body is spelled and in which order query parameters come.
func TestDerivedKeyWhatIsTheSameRequest(t *testing.T) {
	type req struct {
		method, target, body string
		hdr                  []string
	}
	json := func(target, body string, hdr ...string) req {
		return req{"POST", target, body, append([]string{"Content-Type", "application/json; charset=utf-8"}, hdr...)}
	}
	first := json("/accounts/1/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["x","y"]}`)
	for _, tc := range []struct {
		name string
		req  req
		same bool
	}{
		{"identical", first, true},
		{"JSON members reordered, spaced, escaped", json("/accounts/1/charges?a=1&b=2", " {\"tags\": [\"x\",\"\\u0079\"],\n \"currency\":\"EUR\", \"amount\": 100} "), true},
		{"query parameters reordered", json("/accounts/1/charges?b=2&a=1", `{"amount":100,"currency":"EUR","tags":["x","y"]}`), true},
		{"another amount", json("/accounts/1/charges?a=1&b=2", `{"amount":101,"currency":"EUR","tags":["x","y"]}`), false},
		{"a number spelled otherwise", json("/accounts/1/charges?a=1&b=2", `{"amount":100.0,"currency":"EUR","tags":["x","y"]}`), false},
		{"array order", json("/accounts/1/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["y","x"]}`), false},
		{"another path under the same route", json("/accounts/2/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["x","y"]}`), false},
		{"another query", json("/accounts/1/charges?a=1&b=3", `{"amount":100,"currency":"EUR","tags":["x","y"]}`), false},
		{"another method", req{"PATCH", "/accounts/1/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["x","y"]}`, []string{"Content-Type", "application/json"}}, false},
		{"another media type", req{"POST", "/accounts/1/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["x","y"]}`, []string{"Content-Type", "text/plain"}}, false},
		{"another tenant", json("/accounts/1/charges?a=1&b=2", `{"amount":100,"currency":"EUR","tags":["x","y"]}`, "X-Tenant", "globex"), false},
		{"a member named twice", json("/accounts/1/charges?a=1&b=2", `{"amount":1,"amount":100,"currency":"EUR","tags":["x","y"]}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The mux names the route "POST /accounts/{id}/charges" for
			// both account paths: the path itself must tell them apart.
			e := newDerivedEnv(t, time.Minute, idemhttp.WithMethods("POST", "PATCH"))
			mux := http.NewServeMux()
			mux.Handle("/accounts/{id}/charges", e.h)
			e.h = mux
			send := func(q req) *httptest.ResponseRecorder { return e.send(q.method, q.target, q.body, q.hdr...) }
			wantAnswer(t, send(first), 201, "charge 1", true, false)
			if tc.same {
				wantAnswer(t, send(tc.req), 201, "charge 1", true, true)
				e.wantRuns(t, 1)
			} else {
				wantAnswer(t, send(tc.req), 201, "charge 2", true, false)
				e.wantRuns(t, 2)
			}
		})
	}
}

// TestDerivedKeyOptionRefused: a window that is not positive or longer than
// MaxDerivedKeyWindow, or the option with WithOptionalKey, makes New panic
// with a message naming the limit and the reason.
func TestDerivedKeyOptionRefused(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	for _, tc := range []struct {
		opts []idemhttp.Option
		want string
	}{
		{[]idemhttp.Option{idemhttp.WithDerivedKey(0)}, "WithDerivedKey(0s): the window must be > 0 and at most 1m0s (MaxDerivedKeyWindow): every identical request inside it gets the first one's answer"},
		{[]idemhttp.Option{idemhttp.WithDerivedKey(-time.Second)}, "WithDerivedKey(-1s)"},
		{[]idemhttp.Option{idemhttp.WithDerivedKey(idemhttp.MaxDerivedKeyWindow + time.Nanosecond)}, "at most 1m0s (MaxDerivedKeyWindow)"},
		{[]idemhttp.Option{idemhttp.WithDerivedKey(time.Second), idemhttp.WithOptionalKey()}, "WithDerivedKey and WithOptionalKey both given"},
	} {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want it to contain %q", msg, tc.want)
				}
			}()
			idemhttp.New(ex, append(tc.opts, idemhttp.SingleTenant())...)
		}()
	}
	idemhttp.New(ex, idemhttp.SingleTenant(), idemhttp.WithDerivedKey(idemhttp.MaxDerivedKeyWindow)) // the limit itself is accepted
}

// TestDerivedKeyNeverMergesCallers: keyless identical requests from two
// callers never get one answer. With WithTenant the tenant tells them
// apart; with SingleTenant their credentials do (Authorization,
// Proxy-Authorization, Cookie), and the same caller's retry is still one
// request.
func TestDerivedKeyNeverMergesCallers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []idemhttp.Option
		a, b     []string // the two callers' header fields
		distinct bool
	}{
		{"tenants", nil, []string{"X-Tenant", "acme"}, []string{"X-Tenant", "globex"}, true},
		{"single tenant, Authorization", []idemhttp.Option{idemhttp.SingleTenant()},
			[]string{"Authorization", "Bearer alice"}, []string{"Authorization", "Bearer bob"}, true},
		{"single tenant, Cookie", []idemhttp.Option{idemhttp.SingleTenant()},
			[]string{"Cookie", "session=alice"}, []string{"Cookie", "session=bob"}, true},
		{"single tenant, Proxy-Authorization", []idemhttp.Option{idemhttp.SingleTenant()},
			[]string{"Proxy-Authorization", "Basic YQ=="}, []string{"Proxy-Authorization", "Basic Yg=="}, true},
		{"single tenant, one caller", []idemhttp.Option{idemhttp.SingleTenant()},
			[]string{"Authorization", "Bearer alice"}, []string{"Authorization", "Bearer alice"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDerivedEnvTenancy(t, 10*time.Second, tc.opts...)
			first := e.send("POST", "/charges", `{"amount":5}`, tc.a...)
			second := e.send("POST", "/charges", `{"amount":5}`, tc.b...)
			if first.Code != 201 || first.Body.String() != "charge 1" {
				t.Fatalf("first: %d %q", first.Code, first.Body)
			}
			replayed := second.Header().Get(idemhttp.ReplayedHeader) == "true"
			if tc.distinct && (replayed || second.Body.String() != "charge 2") {
				t.Fatalf("another caller got %d %q replayed=%v; want its own charge 2", second.Code, second.Body, replayed)
			}
			if !tc.distinct && (!replayed || second.Body.String() != "charge 1") {
				t.Fatalf("the same caller's retry got %d %q replayed=%v; want the replay of charge 1", second.Code, second.Body, replayed)
			}
		})
	}
}

// newDerivedEnvTenancy is newDerivedEnv whose tenancy is opts' when they
// name one (SingleTenant), else the X-Tenant header.
func newDerivedEnvTenancy(t *testing.T, window time.Duration, opts ...idemhttp.Option) *derivedEnv {
	t.Helper()
	if len(opts) == 0 {
		return newDerivedEnv(t, window)
	}
	e := &derivedEnv{}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(e.elapsed.Load())) }
	ex := idem.NewExecutor(memstore.New(memstore.WithClock(now)), idem.SingleTenant())
	e.h = idemhttp.New(ex, append([]idemhttp.Option{idemhttp.WithDerivedKey(window)}, opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", n)
	}))
	return e
}
