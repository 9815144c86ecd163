// The in-process harness of idemhttp's own tests: one middleware over a
// counting handler (env), sent requests through ServeHTTP or a loopback
// server, with the events its observers saw. The semantics every door
// shares are tested over HTTP by idemhttptest (conformance_test.go); the
// tests here are those of net/http's door itself.
package idemhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// newStoreFunc returns a store for one subtest. Stores returned for one
// backend may share it: the suite uses fresh keys everywhere.
type newStoreFunc func(t *testing.T) idem.Store

// env is one middleware over a counting handler.
type env struct {
	t     *testing.T
	store idem.Store
	ex    *idem.Executor
	h     http.Handler
	runs  atomic.Int64
	mu    sync.Mutex
	evs   []idemhttp.Event
	idevs []idem.Event
	// seen is closed (and replaced) on every event, under mu: waitFor
	// waits on it for the events a test synchronises on.
	seen chan struct{}
}

// hangGuard bounds every wait of the suite for an event: it only turns a
// hang into a failure, and is far longer than any scheduling delay.
const hangGuard = 2 * time.Minute

// noted records that an event arrived, under e.mu.
func (e *env) noted() {
	if e.seen != nil {
		close(e.seen)
	}
	e.seen = make(chan struct{})
}

// waitFor waits until count() (read under e.mu) reaches n, or fails the
// test after hangGuard.
func (e *env) waitFor(what string, n int, count func() int) {
	e.t.Helper()
	if err := e.await(what, n, count); err != nil {
		e.t.Fatal(err)
	}
}

// await is waitFor for any goroutine: it returns an error after hangGuard.
func (e *env) await(what string, n int, count func() int) error {
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	for {
		e.mu.Lock()
		got := count()
		if e.seen == nil {
			e.seen = make(chan struct{})
		}
		seen := e.seen
		e.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-seen:
		case <-guard.C:
			return fmt.Errorf("waited %v for %d %s events, saw %d", hangGuard, n, what, got)
		}
	}
}

// waitEvents waits until the middleware's observer saw n events of kind.
func (e *env) waitEvents(kind idemhttp.EventKind, n int) {
	e.t.Helper()
	if err := e.awaitEvents(kind, n); err != nil {
		e.t.Fatal(err)
	}
}

// awaitEvents is waitEvents for any goroutine (a handler's).
func (e *env) awaitEvents(kind idemhttp.EventKind, n int) error {
	return e.await(kind.String(), n, func() int {
		c := 0
		for _, ev := range e.evs {
			if ev.Kind == kind {
				c++
			}
		}
		return c
	})
}

// waitIdemEvents waits until the executor's observer saw n events of kind.
func (e *env) waitIdemEvents(kind idem.EventKind, n int) {
	e.t.Helper()
	e.waitFor(kind.String(), n, func() int {
		c := 0
		for _, ev := range e.idevs {
			if ev.Kind == kind {
				c++
			}
		}
		return c
	})
}

// newEnv builds a single-tenant env (idemhttp.SingleTenant); the options
// add to it.
func newEnv(t *testing.T, newStore newStoreFunc, handler func(e *env, w http.ResponseWriter, r *http.Request), opts ...idemhttp.Option) *env {
	t.Helper()
	return newTenancyEnv(t, newStore, handler, idemhttp.SingleTenant(), opts...)
}

// newTenancyEnv builds an env with the given tenancy option (WithTenant or
// SingleTenant).
func newTenancyEnv(t *testing.T, newStore newStoreFunc, handler func(e *env, w http.ResponseWriter, r *http.Request), tenancy idemhttp.Option, opts ...idemhttp.Option) *env {
	t.Helper()
	e := &env{t: t, store: newStore(t)}
	e.ex = idem.NewExecutor(e.store, idem.WithObserver(func(ev idem.Event) {
		e.mu.Lock()
		e.idevs = append(e.idevs, ev)
		e.noted()
		e.mu.Unlock()
	}), idem.SingleTenant())
	opts = append([]idemhttp.Option{idemhttp.WithObserver(func(ev idemhttp.Event) {
		e.mu.Lock()
		e.evs = append(e.evs, ev)
		e.noted()
		e.mu.Unlock()
	}), tenancy}, opts...)
	e.h = idemhttp.New(e.ex, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		handler(e, w, r)
	}))
	return e
}

func (e *env) events(kind idemhttp.EventKind) []idemhttp.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ofKind(e.evs, func(ev idemhttp.Event) bool { return ev.Kind == kind })
}

func (e *env) idemEvents(kind idem.EventKind) []idem.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ofKind(e.idevs, func(ev idem.Event) bool { return ev.Kind == kind })
}

// ofKind returns the events of evs that is keeps, in order.
func ofKind[E any](evs []E, is func(E) bool) []E {
	var out []E
	for _, ev := range evs {
		if is(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// do sends one request through the middleware, in process.
func (e *env) do(method, target, key, body string, hdr ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if key != "" {
		r.Header.Set(idemhttp.Header, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *env) wantRuns(n int64) {
	e.t.Helper()
	if got := e.runs.Load(); got != n {
		e.t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %q", w.Code, status, w.Body.String())
	}
}

func wantReplayed(t *testing.T, h http.Header, replayed bool) {
	t.Helper()
	got := h.Get(idemhttp.ReplayedHeader) == "true"
	if got != replayed {
		t.Fatalf("%s: %q, want replayed=%v", idemhttp.ReplayedHeader, h.Get(idemhttp.ReplayedHeader), replayed)
	}
}

// wantProblem checks an RFC 9457 problem response naming rule.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, rule string) idemhttp.Problem {
	t.Helper()
	wantStatus(t, w, status)
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	if p.Status != status || !strings.HasSuffix(p.Type, "#"+rule) || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d, type ending #%s, a title and a detail", p, status, rule)
	}
	return p
}

func statusHandler(status int) func(e *env, w http.ResponseWriter, r *http.Request) {
	return func(e *env, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		fmt.Fprintf(w, "run %d", e.runs.Load())
	}
}

// richHandler sets allowed, disallowed and credential headers and writes
// every byte value.
func richHandler(e *env, w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Location", "/orders/42")
	h.Set("ETag", `"v1"`)
	h.Add("Link", `</a>; rel="a"`)
	h.Add("Link", `</b>; rel="b"`)
	h.Set("X-Request-Id", "req-"+strconv.FormatInt(e.runs.Load(), 10))
	h.Set("Set-Cookie", "session=secret; HttpOnly")
	h.Set("Authorization", "Bearer secret")
	h.Set("WWW-Authenticate", `Bearer realm="x"`)
	w.WriteHeader(http.StatusCreated)
	body := make([]byte, 0, 3*256)
	for i := range 3 * 256 {
		body = append(body, byte(i))
	}
	_, _ = w.Write(body[:100])
	_, _ = w.Write(body[100:])
}

// blockingHandler waits for release before answering 201.
func blockingHandler(started chan<- struct{}, release <-chan struct{}) func(e *env, w http.ResponseWriter, r *http.Request) {
	return func(e *env, w http.ResponseWriter, r *http.Request) {
		if started != nil {
			started <- struct{}{}
		}
		<-release
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "done")
	}
}

// loopback serves h on a real server over loopback.
func loopback(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, c *http.Client, url, key, body string, hdr ...string) (int, http.Header, string, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

func postVia(ctx context.Context, c *http.Client, url, body string) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
