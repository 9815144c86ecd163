package idemhttp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// runSuite runs the store-independent tests of the middleware on the stores
// that newStore returns.
func runSuite(t *testing.T, newStore newStoreFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newStore newStoreFunc)
	}{
		{"StatusPolicy", testStatusPolicy},
		{"StoreAllPolicy", testStoreAllPolicy},
		{"ReplayByteForByte", testReplayByteForByte},
		{"NoCredentialHeadersReplayed", testNoCredentialHeaders},
		{"MissingKey", testMissingKey},
		{"OptionalKey", testOptionalKey},
		{"InvalidKey", testInvalidKey},
		{"QuotedAndBareKeysAreOne", testQuotedAndBare},
		{"KeyReusedWithAnotherRequest", testKeyReused},
		{"CustomFingerprint", testCustomFingerprint},
		{"InFlight409RetryAfter", testInFlight},
		{"InFlightWait", testInFlightWait},
		{"Concurrent64", testConcurrent},
		{"Concurrent64Wait", testConcurrentWait},
		{"TenantIsolation", testTenantIsolation},
		{"OperationScope", testOperationScope},
		{"ClientTimeoutThenRetry", testClientTimeoutThenRetry},
		{"ClientCancellationOption", testClientCancellationOption},
		{"PanicReleases", testPanicReleases},
		{"ResponseTooLarge", testResponseTooLarge},
		{"RequestBody", testRequestBody},
		{"Streaming", testStreaming},
		{"OtherMethodsPassThrough", testOtherMethods},
		{"TransportKeepsKeyAcrossRetries", testTransportRetries},
		{"StripeGoChargesOnce", testStripeChargesOnce},
		{"PathBytesAndLength", testPathBytes},
		{"TenantLength", testTenantLength},
		{"TenantMissing", testTenantMissing},
		{"ReplayHonoursAcceptEncodingAndVary", testReplayVary},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore)
		})
	}
}

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
	var out []idemhttp.Event
	for _, ev := range e.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (e *env) idemEvents(kind idem.EventKind) []idem.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idem.Event
	for _, ev := range e.idevs {
		if ev.Kind == kind {
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

var allStatuses = []int{200, 201, 202, 204, 301, 302, 303, 304, 307, 308, 400, 401, 402, 403, 404, 405,
	408, 409, 410, 412, 415, 422, 425, 429, 500, 501, 502, 503, 504}

func testStatusPolicy(t *testing.T, newStore newStoreFunc) {
	for _, status := range allStatuses {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t, newStore, statusHandler(status))
			key := idemhttp.GenerateKey()
			first := e.do("POST", "/orders", key, `{"n":1}`)
			wantStatus(t, first, status)
			wantReplayed(t, first.Header(), false)
			second := e.do("POST", "/orders", key, `{"n":1}`)
			wantStatus(t, second, status)
			stored := idemhttp.DefaultPolicy(status)
			wantStored := status < 500 && status != 408 && status != 409 && status != 425 && status != 429
			if stored != wantStored {
				t.Fatalf("DefaultPolicy(%d) = %v", status, stored)
			}
			if stored {
				e.wantRuns(1)
				wantReplayed(t, second.Header(), true)
				if !bytes.Equal(first.Body.Bytes(), second.Body.Bytes()) {
					t.Fatalf("replayed body %q, first %q", second.Body, first.Body)
				}
				if n := len(e.events(idemhttp.EventReplayed)); n != 1 {
					t.Fatalf("%d replay events, want 1", n)
				}
			} else {
				e.wantRuns(2)
				wantReplayed(t, second.Header(), false)
				if n := len(e.events(idemhttp.EventNotStored)); n != 2 {
					t.Fatalf("%d not-stored events, want 2", n)
				}
				if n := len(e.idemEvents(idem.EventReleased)); n != 2 {
					t.Fatalf("%d released events, want 2", n)
				}
			}
		})
	}
}

func testStoreAllPolicy(t *testing.T, newStore newStoreFunc) {
	for _, status := range []int{201, 409, 429, 500, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t, newStore, statusHandler(status), idemhttp.WithPolicy(idemhttp.StoreAll))
			key := idemhttp.GenerateKey()
			e.do("POST", "/charges", key, "a")
			second := e.do("POST", "/charges", key, "a")
			wantStatus(t, second, status)
			wantReplayed(t, second.Header(), true)
			e.wantRuns(1)
		})
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

func testReplayByteForByte(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, richHandler)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	key := idemhttp.GenerateKey()
	send := func() (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders?x=1", strings.NewReader(`{"item":"book"}`))
		req.Header.Set(idemhttp.Header, key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	first, firstBody := send()
	second, secondBody := send()
	e.wantRuns(1)
	if first.StatusCode != 201 || second.StatusCode != 201 {
		t.Fatalf("statuses %d, %d", first.StatusCode, second.StatusCode)
	}
	if !bytes.Equal(firstBody, secondBody) || len(firstBody) != 768 {
		t.Fatalf("body differs: %d vs %d bytes", len(firstBody), len(secondBody))
	}
	wantReplayed(t, first.Header, false)
	wantReplayed(t, second.Header, true)
	for _, k := range []string{"Content-Type", "Location", "ETag", "Link", "Content-Length"} {
		if a, b := first.Header.Values(k), second.Header.Values(k); strings.Join(a, "\n") != strings.Join(b, "\n") || len(a) == 0 {
			t.Errorf("header %s: first %q, replay %q", k, a, b)
		}
	}
	if first.Header.Get("X-Request-Id") != "req-1" || second.Header.Get("X-Request-Id") != "" {
		t.Errorf("X-Request-Id (not allow-listed): first %q, replay %q", first.Header.Get("X-Request-Id"), second.Header.Get("X-Request-Id"))
	}
}

func testNoCredentialHeaders(t *testing.T, newStore newStoreFunc) {
	// Even when a careless allow-list names them.
	e := newEnv(t, newStore, richHandler,
		idemhttp.WithStoredHeaders("Content-Type", "X-Request-Id", "Set-Cookie", "Authorization", "WWW-Authenticate"))
	key := idemhttp.GenerateKey()
	first := e.do("POST", "/login", key, "u=a")
	if first.Header().Get("Set-Cookie") == "" {
		t.Fatal("the first response lost its cookie")
	}
	second := e.do("POST", "/login", key, "u=a")
	wantReplayed(t, second.Header(), true)
	for _, k := range []string{"Set-Cookie", "Authorization", "Www-Authenticate", "Location"} {
		if v := second.Header().Values(k); len(v) != 0 {
			t.Errorf("replayed %s: %q", k, v)
		}
	}
	if got := second.Header().Get("X-Request-Id"); got != "req-1" {
		t.Errorf("allow-listed X-Request-Id replayed as %q", got)
	}
}

func testMissingKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	w := e.do("POST", "/orders", "", "{}")
	p := wantProblem(t, w, 400, "missing-key")
	if !strings.Contains(p.Title, "missing") {
		t.Errorf("title %q", p.Title)
	}
	e.wantRuns(0)
	if n := len(e.events(idemhttp.EventKeyMissing)); n != 1 {
		t.Fatalf("%d missing-key events", n)
	}
}

func testOptionalKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201), idemhttp.WithOptionalKey())
	wantStatus(t, e.do("POST", "/orders", "", "{}"), 201)
	wantStatus(t, e.do("POST", "/orders", "", "{}"), 201)
	e.wantRuns(2)
	evs := e.events(idemhttp.EventKeyMissing)
	if len(evs) != 2 || evs[0].Status != 0 {
		t.Fatalf("missing-key events %+v", evs)
	}
	wantProblem(t, e.do("POST", "/orders", `"unterminated`, "{}"), 400, "invalid-key")
}

func testInvalidKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	for _, k := range []string{`""`, `"abc`, `"a"b"`, "é", "a\x01b", strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`} {
		wantProblem(t, e.do("POST", "/orders", k, "{}"), 400, "invalid-key")
	}
	// Two header fields, and a list in one (as a proxy may combine them).
	wantProblem(t, e.do("POST", "/orders", "a", "{}", idemhttp.Header, "b"), 400, "invalid-key")
	for _, k := range []string{"key-1, key-2", `"key-1", "key-2"`, `"key-1";v=1,"key-2"`} {
		p := wantProblem(t, e.do("POST", "/orders", k, "{}"), 400, "invalid-key")
		if !strings.Contains(p.Detail, "list") {
			t.Errorf("%q: detail %q does not say it is a list", k, p.Detail)
		}
	}
	e.wantRuns(0)
	wantStatus(t, e.do("POST", "/orders", strings.Repeat("k", 255), "{}"), 201)
}

func testQuotedAndBare(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders", idemhttp.FormatKey(key), "{}"), 201)
	w := e.do("POST", "/orders", key, "{}")
	wantReplayed(t, w.Header(), true)
	e.wantRuns(1)
}

func testKeyReused(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders?a=1", key, `{"n":1}`), 201)
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/orders?a=1", `{"n":2}`}, // body
		{"POST", "/orders?a=2", `{"n":1}`}, // query
	} { // (a path under the same route: see OperationScope)
		p := wantProblem(t, e.do(c.method, c.target, key, c.body), 422, "key-reused")
		if !strings.Contains(p.Detail, "different request") {
			t.Errorf("detail %q", p.Detail)
		}
	}
	e.wantRuns(1)
	if n := len(e.events(idemhttp.EventConflict)); n != 2 {
		t.Fatalf("%d conflict events", n)
	}
}

func testCustomFingerprint(t *testing.T, newStore newStoreFunc) {
	// Only the "amount" field counts: a client that adds a timestamp on
	// retry still gets the replay; another amount is refused.
	fp := func(r *http.Request, body []byte, h *idem.Hasher) error {
		var v struct {
			Amount int64 `json:"amount"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		h.String(r.URL.Path)
		h.Int(v.Amount)
		return nil
	}
	e := newEnv(t, newStore, statusHandler(201), idemhttp.WithFingerprint(fp))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/pay", key, `{"amount":5,"ts":1}`), 201)
	wantReplayed(t, e.do("POST", "/pay", key, `{"amount":5,"ts":2}`).Header(), true)
	wantProblem(t, e.do("POST", "/pay", key, `{"amount":6,"ts":3}`), 422, "key-reused")
	wantProblem(t, e.do("POST", "/pay", key, `not json`), 400, "invalid-request")
	e.wantRuns(1)
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

func testInFlight(t *testing.T, newStore newStoreFunc) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // on failure too
	// The lease only guards against a hang: the requests in flight must
	// find the claim live whatever the scheduling delays.
	e := newEnv(t, newStore, blockingHandler(started, release), idemhttp.WithLease(hangGuard))
	key := idemhttp.GenerateKey()
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- e.do("POST", "/orders", key, "{}") }()
	<-started
	w := e.do("POST", "/orders", key, "{}")
	wantProblem(t, w, 409, "request-in-progress")
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || ra < 1 || ra > int(hangGuard/time.Second) {
		t.Fatalf("Retry-After %q, want 1..%d seconds", w.Header().Get("Retry-After"), int(hangGuard/time.Second))
	}
	// A different body while in flight is a conflict, not "in progress",
	// on every store (a transactional store tells it from the payload of
	// the claim it has not committed yet).
	wantProblem(t, e.do("POST", "/orders", key, `{"other":1}`), 422, "key-reused")
	once.Do(func() { close(release) })
	wantStatus(t, <-done, 201)
	wantReplayed(t, e.do("POST", "/orders", key, "{}").Header(), true)
	e.wantRuns(1)
}

func testInFlightWait(t *testing.T, newStore newStoreFunc) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // on failure too
	// The wait and the lease only guard against a hang: the duplicate must
	// get the first's response whatever the scheduling delays.
	e := newEnv(t, newStore, blockingHandler(started, release), idemhttp.WithWait(hangGuard), idemhttp.WithLease(hangGuard))
	key := idemhttp.GenerateKey()
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- e.do("POST", "/orders", key, "{}") }()
	<-started
	second := make(chan *httptest.ResponseRecorder)
	go func() { second <- e.do("POST", "/orders", key, "{}") }()
	// Another body: 422, whether it is told at once or after waiting.
	other := make(chan *httptest.ResponseRecorder)
	go func() { other <- e.do("POST", "/orders", key, `{"other":1}`) }()
	// Whether the duplicates reach the store before the first completes
	// (they wait) or after (they find its outcome), the answers are the
	// same: nothing here depends on how they are scheduled.
	once.Do(func() { close(release) })
	a, b := <-first, <-second
	wantProblem(t, <-other, 422, "key-reused")
	wantStatus(t, a, 201)
	wantStatus(t, b, 201)
	wantReplayed(t, b.Header(), true)
	if a.Body.String() != b.Body.String() {
		t.Fatalf("bodies %q, %q", a.Body, b.Body)
	}
	e.wantRuns(1)
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

// concurrent sends n requests with one key at once. The handler holds the
// claim until every request reached the server and, without WithWait,
// until the n-1 others were answered 409: the overlap is made by events,
// not by a sleep, so the answers are the same however the requests are
// scheduled.
func concurrent(t *testing.T, newStore newStoreFunc, wait bool, opts ...idemhttp.Option) (e *env, statuses map[int]int, bodies map[string]int) {
	const n = 64
	var arrived atomic.Int64
	allArrived := make(chan struct{})
	e = newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		select {
		case <-allArrived:
		case <-time.After(hangGuard):
			t.Errorf("%d of %d requests arrived in %v", arrived.Load(), n, hangGuard)
		}
		if !wait {
			if err := e.awaitEvents(idemhttp.EventInProgress, n-1); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, "order %d", e.runs.Load())
	}, opts...)
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == n {
			close(allArrived)
		}
		e.h.ServeHTTP(w, r)
	}))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	key := idemhttp.GenerateKey()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses, bodies = map[int]int{}, map[string]int{}
	startLine := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-startLine
			st, _, body, err := post(t, client, srv.URL+"/orders", key, `{"item":"x"}`)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			statuses[st]++
			if st == 201 {
				bodies[body]++
			}
		})
	}
	close(startLine)
	wg.Wait()
	return e, statuses, bodies
}

func testConcurrent(t *testing.T, newStore newStoreFunc) {
	// The lease only guards against a hang (see concurrent).
	e, statuses, bodies := concurrent(t, newStore, false, idemhttp.WithLease(hangGuard))
	e.wantRuns(1)
	if statuses[201] != 1 || statuses[409] != 63 || len(bodies) != 1 {
		t.Fatalf("statuses %v, bodies %v", statuses, bodies)
	}
}

func testConcurrentWait(t *testing.T, newStore newStoreFunc) {
	// The wait and the lease only guard against a hang (see concurrent).
	e, statuses, bodies := concurrent(t, newStore, true, idemhttp.WithWait(hangGuard), idemhttp.WithLease(hangGuard))
	e.wantRuns(1)
	if statuses[201] != 64 || len(bodies) != 1 {
		t.Fatalf("statuses %v, bodies %v", statuses, bodies)
	}
}

func testTenantIsolation(t *testing.T, newStore newStoreFunc) {
	tenant := func(r *http.Request) string { u, _, _ := r.BasicAuth(); return u }
	e := newTenancyEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		u, _, _ := r.BasicAuth()
		w.WriteHeader(201)
		fmt.Fprintf(w, "order for %s", u)
	}, idemhttp.WithTenant(tenant))
	key := idemhttp.GenerateKey()
	auth := func(u string) []string {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, "pw")
		return []string{"Authorization", r.Header.Get("Authorization")}
	}
	a := e.do("POST", "/orders", key, "{}", auth("alice")...)
	b := e.do("POST", "/orders", key, "{}", auth("bob")...)
	e.wantRuns(2)
	wantReplayed(t, b.Header(), false)
	if a.Body.String() != "order for alice" || b.Body.String() != "order for bob" {
		t.Fatalf("bodies %q, %q", a.Body, b.Body)
	}
	// Bob guessing Alice's key with another body: a new request, not a 422.
	wantStatus(t, e.do("POST", "/orders", idemhttp.GenerateKey(), `{"x":1}`, auth("bob")...), 201)
	again := e.do("POST", "/orders", key, "{}", auth("alice")...)
	wantReplayed(t, again.Header(), true)
	if again.Body.String() != "order for alice" {
		t.Fatalf("alice's replay %q", again.Body)
	}
	e.wantRuns(3)
	ev := e.events(idemhttp.EventReplayed)
	if len(ev) != 1 || ev[0].Tenant != "alice" {
		t.Fatalf("replay events %+v", ev)
	}
}

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

// abandon sends a POST with key and gives up on it, as a client whose
// timeout fires does, once started says its handler runs: the claim
// happens before the client leaves, whatever the scheduling. It returns
// the client's error.
func abandon(t *testing.T, c *http.Client, url, key string, started <-chan struct{}) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.Header, key)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the request was answered (%v) before its handler started", err)
	case <-guard.C:
		t.Fatalf("the handler did not start within %v", hangGuard)
	}
	cancel() // the client's timeout, after the claim
	return <-done
}

func testClientTimeoutThenRetry(t *testing.T, newStore newStoreFunc) {
	started := make(chan struct{})
	release := make(chan struct{}) // the handler runs until the in-flight retry was answered
	var once sync.Once
	defer once.Do(func() { close(release) }) // on failure too
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		close(started) // once: a second run would panic, and fail the test
		<-release
		if err := r.Context().Err(); err != nil {
			t.Errorf("handler context ended with its client: %v", err)
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"order":"o-1"}`)
	}, idemhttp.WithLease(hangGuard)) // the retry in flight must not take a lapsed lease over
	srv := loopback(t, e.h)
	key := idemhttp.GenerateKey()
	if err := abandon(t, srv.Client(), srv.URL+"/orders", key, started); err == nil {
		t.Fatal("the first attempt did not time out")
	}
	// A retry while the handler still runs: 409.
	st, _, _, err := post(t, srv.Client(), srv.URL+"/orders", key, "{}")
	if err != nil || st != 409 {
		t.Fatalf("retry in flight: %d %v, want 409", st, err)
	}
	once.Do(func() { close(release) })
	// The first attempt's outcome is stored (no one reads its response):
	// the retry after it is a replay.
	e.waitIdemEvents(idem.EventCompleted, 1)
	st, h, body, err := post(t, srv.Client(), srv.URL+"/orders", key, "{}")
	if err != nil || st != 201 || body != `{"order":"o-1"}` || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("retry after the timeout: %d %q %v %v", st, body, h, err)
	}
	e.wantRuns(1)
}

func testClientCancellationOption(t *testing.T, newStore newStoreFunc) {
	// With WithClientCancellation, a handler that gives up without writing
	// when its client leaves releases the key.
	started := make(chan struct{})
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() == 1 {
			close(started)
			select {
			case <-r.Context().Done():
				return
			case <-time.After(hangGuard):
				t.Error("the handler's context did not end with its client")
			}
		}
		w.WriteHeader(201)
	}, idemhttp.WithClientCancellation())
	srv := loopback(t, e.h)
	key := idemhttp.GenerateKey()
	if err := abandon(t, srv.Client(), srv.URL+"/orders", key, started); err == nil {
		t.Fatal("the first attempt did not time out")
	}
	// The key is released once the handler returned: the retry runs it.
	e.waitIdemEvents(idem.EventReleased, 1)
	st, h, _, err := post(t, srv.Client(), srv.URL+"/orders", key, "{}")
	if err != nil || st != 201 || h.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("retry: %d %v %v", st, h, err)
	}
	e.wantRuns(2)
	rel := e.idemEvents(idem.EventReleased)
	if len(rel) != 1 || !errors.Is(rel[0].Err, idemhttp.ErrNoResponse) {
		t.Fatalf("released events %+v", rel)
	}
}

func testPanicReleases(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() == 1 {
			w.WriteHeader(201) // written, but never sent: buffered
			panic("boom")
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "second")
	})
	key := idemhttp.GenerateKey()
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		e.do("POST", "/orders", key, "{}")
	}()
	w := e.do("POST", "/orders", key, "{}")
	wantStatus(t, w, 201)
	wantReplayed(t, w.Header(), false)
	e.wantRuns(2)

	// Over a real server: the client sees the connection cut, not a
	// half-response, and the retry runs again.
	e2 := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() == 1 {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(201)
	})
	srv := loopback(t, e2.h)
	key = idemhttp.GenerateKey()
	if _, _, _, err := post(t, srv.Client(), srv.URL+"/x", key, "{}"); err == nil {
		t.Fatal("no error after a panic")
	}
	st, _, _, err := post(t, srv.Client(), srv.URL+"/x", key, "{}")
	if err != nil || st != 201 {
		t.Fatalf("retry after panic: %d %v", st, err)
	}
	e2.wantRuns(2)
}

func testResponseTooLarge(t *testing.T, newStore newStoreFunc) {
	big := strings.Repeat("x", 1000)
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for range 10 {
			_, _ = io.WriteString(w, big[:100])
		}
	}, idemhttp.WithMaxResponse(500))
	key := idemhttp.GenerateKey()
	w := e.do("POST", "/report", key, "{}")
	if w.Code != 200 || w.Body.String() != big || w.Header().Get(idemhttp.NotStoredHeader) != "too-large" {
		t.Fatalf("client got %d, %d bytes, %v", w.Code, w.Body.Len(), w.Header())
	}
	// Not stored, and not released: the retry is refused, never run.
	w = e.do("POST", "/report", key, "{}")
	if w.Code != 500 || !strings.Contains(w.Body.String(), "response-not-replayable") {
		t.Fatalf("second response: %d %s", w.Code, w.Body)
	}
	wantReplayed(t, w.Header(), false)
	e.wantRuns(1)
	if n := len(e.events(idemhttp.EventResponseTooLarge)); n != 1 {
		t.Fatalf("%d too-large events", n)
	}
	// At the limit exactly: stored.
	e2 := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big[:500]) },
		idemhttp.WithMaxResponse(500))
	key = idemhttp.GenerateKey() // the first key stays decided (on a shared store too)
	e2.do("POST", "/report", key, "{}")
	wantReplayed(t, e2.do("POST", "/report", key, "{}").Header(), true)
}

func testRequestBody(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		if k, ok := idem.KeyFrom(r.Context()); !ok || len(k) != 64 {
			t.Errorf("idem.KeyFrom in the handler: %q %v", k, ok)
		}
		w.WriteHeader(201)
		_, _ = w.Write(b)
	}, idemhttp.WithMaxBody(1000))
	srv := loopback(t, e.h)
	body := strings.Repeat("é", 500) // 1000 bytes
	st, _, got, err := post(t, srv.Client(), srv.URL+"/echo", idemhttp.GenerateKey(), body)
	if err != nil || st != 201 || got != body {
		t.Fatalf("echo: %d %v, body intact: %v", st, err, got == body)
	}
	st, _, _, err = post(t, srv.Client(), srv.URL+"/echo", idemhttp.GenerateKey(), body+"x")
	if err != nil || st != 413 {
		t.Fatalf("oversized body: %d %v", st, err)
	}
	// Chunked (unknown length) too.
	req, _ := http.NewRequest("POST", srv.URL+"/echo", io.MultiReader(strings.NewReader(body), strings.NewReader("xy")))
	req.Header.Set(idemhttp.Header, idemhttp.GenerateKey())
	resp, err := srv.Client().Do(req)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("oversized chunked body: %v %v", resp, err)
	}
	resp.Body.Close()
	e.wantRuns(1)
	if n := len(e.events(idemhttp.EventBodyTooLarge)); n != 2 {
		t.Fatalf("%d body-too-large events", n)
	}
}

func testStreaming(t *testing.T, newStore newStoreFunc) {
	firstChunk := make(chan struct{})
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(2 * hangGuard)); err != nil {
			t.Errorf("SetWriteDeadline through the middleware: %v", err)
		}
		if err := rc.EnableFullDuplex(); err != nil {
			t.Errorf("EnableFullDuplex through the middleware: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		if e.runs.Load() == 1 {
			select {
			case <-firstChunk: // the client read the first event before the handler finished
			case <-time.After(hangGuard):
				t.Error("the first event did not reach the client before the handler finished")
			}
		}
		_, _ = io.WriteString(w, "data: 2\n\n")
		w.(http.Flusher).Flush()
	})
	srv := loopback(t, e.h)
	key := idemhttp.GenerateKey()
	req, _ := http.NewRequest("POST", srv.URL+"/events", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: 1\n\n" {
		t.Fatalf("first event %q %v", buf, err)
	}
	close(firstChunk)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "data: 2\n\n" {
		t.Fatalf("rest %q", rest)
	}
	// The streamed response was stored whole and is replayed in one piece.
	e.waitIdemEvents(idem.EventCompleted, 1)
	st, h, body, err := post(t, srv.Client(), srv.URL+"/events", key, "{}")
	if err != nil || st != 200 || body != "data: 1\n\ndata: 2\n\n" || h.Get(idemhttp.ReplayedHeader) != "true" ||
		h.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("replay of a stream: %d %q %v %v", st, body, h, err)
	}
	e.wantRuns(1)
}

func testOtherMethods(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(200))
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		wantStatus(t, e.do(m, "/orders", "", ""), 200)
	}
	key := idemhttp.GenerateKey()
	e.do("GET", "/orders", key, "")
	wantReplayed(t, e.do("GET", "/orders", key, "").Header(), false)
	e.wantRuns(5)
	if len(e.evs) != 0 {
		t.Fatalf("events for other methods: %+v", e.evs)
	}
	e2 := newEnv(t, newStore, statusHandler(200), idemhttp.WithMethods("PUT"))
	wantStatus(t, e2.do("POST", "/orders", "", ""), 200)
	wantProblem(t, e2.do("PUT", "/orders", "", ""), 400, "missing-key")
}

// flakyTransport fails the first attempt after the server got the request
// (the response is lost) and passes the others through.
type flakyTransport struct {
	base  http.RoundTripper
	calls atomic.Int64
	keys  sync.Map
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := f.calls.Add(1)
	f.keys.Store(n, req.Header.Get(idemhttp.Header))
	resp, err := f.base.RoundTrip(req)
	if n == 1 && err == nil {
		resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (simulated)")}
	}
	return resp, err
}

func (f *flakyTransport) distinctKeys() map[string]bool {
	m := map[string]bool{}
	f.keys.Range(func(_, v any) bool { m[v.(string)] = true; return true })
	return m
}

func testTransportRetries(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprintf(w, "order %d", e.runs.Load())
	})
	srv := loopback(t, e.h)

	// 1. A retry loop that sends the same *http.Request again (GetBody),
	//    through an http.Client with a Timeout (which forks the request;
	//    the Timeout only guards against a hang).
	flaky := &flakyTransport{base: srv.Client().Transport}
	client := &http.Client{Timeout: hangGuard, Transport: &idemhttp.Transport{Base: flaky}}
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"item":"x"}`))
	var resp *http.Response
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			req.Body, _ = req.GetBody()
		}
		if resp, err = client.Do(req); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "order 1" || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("loop retry: %q %v", b, resp.Header)
	}
	if keys := flaky.distinctKeys(); len(keys) != 1 || flaky.calls.Load() != 2 {
		t.Fatalf("keys across attempts %v, %d attempts", keys, flaky.calls.Load())
	}
	e.wantRuns(1)

	// 2. A retrying RoundTripper wrapping idemhttp.Transport.
	flaky2 := &flakyTransport{base: srv.Client().Transport}
	retrying := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		inner := &idemhttp.Transport{Base: flaky2}
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				req.Body, _ = req.GetBody()
			}
			resp, err := inner.RoundTrip(req)
			if err == nil || attempt == 2 {
				return resp, err
			}
		}
	})
	st, h, body, err := postVia(context.Background(), &http.Client{Transport: retrying}, srv.URL+"/orders", `{"item":"y"}`)
	if err != nil || st != 201 || body != "order 2" || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("retrying transport: %d %q %v %v", st, body, h, err)
	}
	if keys := flaky2.distinctKeys(); len(keys) != 1 {
		t.Fatalf("keys across attempts %v", keys)
	}
	e.wantRuns(2)

	// 3. A loop that builds a new request per attempt, with ContextWithOutgoingKey.
	flaky3 := &flakyTransport{base: srv.Client().Transport}
	c3 := &http.Client{Transport: &idemhttp.Transport{Base: flaky3, Quoted: true}}
	ctx := idemhttp.ContextWithOutgoingKey(context.Background(), idemhttp.GenerateKey())
	for attempt := 0; ; attempt++ {
		st, h, body, err = postVia(ctx, c3, srv.URL+"/orders", `{"item":"z"}`)
		if err == nil || attempt == 2 {
			break
		}
	}
	if err != nil || body != "order 3" || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("new request per attempt: %d %q %v", st, body, err)
	}
	k, _ := idemhttp.OutgoingKeyFromContext(ctx)
	if keys := flaky3.distinctKeys(); len(keys) != 1 || !keys[idemhttp.FormatKey(k)] {
		t.Fatalf("keys across attempts %v, want %q", keys, k)
	}
	e.wantRuns(3)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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

// testTenantLength: a tenant longer than a store records is refused with
// 400, one at the limit is served.
func testTenantLength(t *testing.T, newStore newStoreFunc) {
	e := newTenancyEnv(t, newStore, statusHandler(201),
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	key := idemhttp.GenerateKey()
	for range 2 {
		wantProblem(t, e.do("POST", "/orders", key, "{}", "X-Account", strings.Repeat("t", idem.MaxTenantLen+1)), 400, "scope-too-long")
	}
	e.wantRuns(0)
	wantStatus(t, e.do("POST", "/orders", key, "{}", "X-Account", strings.Repeat("t", idem.MaxTenantLen)), 201)
	wantReplayed(t, e.do("POST", "/orders", key, "{}", "X-Account", strings.Repeat("t", idem.MaxTenantLen)).Header(), true)
	e.wantRuns(1)
}

// testTenantMissing: under WithTenant, a request its function names no
// tenant for is refused with 403 before anything runs or is claimed, with
// the same key and body as another client's: it neither gets that
// response nor shares a key space with other unauthenticated requests.
func testTenantMissing(t *testing.T, newStore newStoreFunc) {
	e := newTenancyEnv(t, newStore, statusHandler(201),
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders", key, "{}", "X-Account", "alice"), 201)
	for range 2 {
		wantProblem(t, e.do("POST", "/orders", key, "{}"), 403, "missing-tenant")
		wantProblem(t, e.do("POST", "/orders", idemhttp.GenerateKey(), "{}"), 403, "missing-tenant")
	}
	e.wantRuns(1)
	if ev := e.events(idemhttp.EventTenantMissing); len(ev) != 4 || ev[0].Status != 403 || ev[0].Key == "" {
		t.Fatalf("tenant_missing events %+v", ev)
	}
	if n := len(e.idemEvents(idem.EventClaimed)); n != 1 {
		t.Fatalf("%d claims, want 1 (alice's)", n)
	}
	wantReplayed(t, e.do("POST", "/orders", key, "{}", "X-Account", "alice").Header(), true)
}

// negotiatingHandler answers in the representation the request selects:
// gzip when Accept-Encoding names it (Vary: Accept-Encoding), a greeting in
// the Accept-Language on /greet (Vary: Accept-Language), and on /asset a
// pre-compressed body whatever the request says (no Vary).
func negotiatingHandler(e *env, w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	body := fmt.Sprintf("order %d", e.runs.Load())
	gz := false
	switch r.URL.Path {
	case "/greet":
		h.Set("Vary", "Accept-Language")
		body = r.Header.Get("Accept-Language") + " " + body
	case "/me":
		h.Set("Vary", "Authorization, Idempotency-Key")
	case "/asset":
		gz = true
	default:
		h.Set("Vary", "Accept-Encoding")
		gz = strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	}
	if !gz {
		w.WriteHeader(201)
		_, _ = io.WriteString(w, body)
		return
	}
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(201)
	zw := gzip.NewWriter(w)
	_, _ = io.WriteString(zw, body)
	_ = zw.Close()
}

func testReplayVary(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, negotiatingHandler)
	type try struct {
		hdr  []string
		want int // 0: replayed
	}
	check := func(target string, runs int64, tries ...try) {
		t.Helper()
		key := idemhttp.GenerateKey()
		first := e.do("POST", target, key, "{}", tries[0].hdr...)
		wantStatus(t, first, 201)
		for _, tr := range tries[1:] {
			w := e.do("POST", target, key, "{}", tr.hdr...)
			if tr.want == 0 {
				wantStatus(t, w, 201)
				wantReplayed(t, w.Header(), true)
				if !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) || w.Header().Get("Content-Encoding") != first.Header().Get("Content-Encoding") {
					t.Fatalf("%s %q: replay %v %q, first %v %q", target, tr.hdr, w.Header(), w.Body, first.Header(), first.Body)
				}
				continue
			}
			p := wantProblem(t, w, tr.want, "replay-not-acceptable")
			if name := tries[0].hdr; len(name) > 0 && !strings.Contains(p.Detail, http.CanonicalHeaderKey(name[0])) {
				t.Errorf("%s %q: detail %q does not name %s", target, tr.hdr, p.Detail, name[0])
			}
		}
		e.wantRuns(runs)
	}
	ae := func(v string) []string { return []string{"Accept-Encoding", v} }
	// A gzip response, selected by Accept-Encoding: gzip.
	check("/orders", 1,
		try{ae("gzip"), 0},
		try{ae("gzip"), 0},
		try{ae("br, gzip;q=0.5"), 0},
		try{ae("x-gzip"), 0},
		try{ae("*"), 0},
		try{nil, 406}, // no Accept-Encoding: no coding accepted
		try{ae("identity"), 406},
		try{ae("gzip;q=0"), 406},
		try{ae("br"), 406},
		try{ae("*, gzip;q=0"), 406},
	)
	// An uncompressed response is acceptable unless identity is refused.
	check("/orders", 2,
		try{nil, 0},
		try{ae("gzip"), 0},
		try{ae("*;q=0"), 406},
		try{ae("identity;q=0, gzip"), 406},
	)
	// Pre-compressed, no Vary: the first request's Accept-Encoding selected
	// it, even absent; the same request is always replayed.
	check("/asset", 3,
		try{nil, 0},
		try{nil, 0},
		try{ae("gzip, deflate"), 0},
		try{ae("deflate"), 406},
	)
	// Vary: Accept-Language: the same list elements, or 406.
	al := func(v string) []string { return []string{"Accept-Language", v} }
	check("/greet", 4,
		try{al("en, fr;q=0.5"), 0},
		try{al("en,fr;q=0.5"), 0},
		try{al("fr"), 406},
		try{nil, 406},
	)
	// Vary: Authorization: compared, never stored in clear.
	az := func(v string) []string { return []string{"Authorization", v} }
	check("/me", 5,
		try{az("Bearer a"), 0},
		try{az("Bearer a"), 0},
		try{az("Bearer b"), 406},
	)
	// The key's form (quoted or bare) is not a representation choice.
	quoted := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/me", idemhttp.FormatKey(quoted), "{}", az("Bearer a")...), 201)
	wantReplayed(t, e.do("POST", "/me", quoted, "{}", az("Bearer a")...).Header(), true)
	e.wantRuns(6)
	if n := len(e.events(idemhttp.EventNotAcceptable)); n != 11 {
		t.Fatalf("%d not-acceptable events, want 11", n)
	}
	// And the first response decodes.
	key := idemhttp.GenerateKey()
	e.do("POST", "/orders", key, "{}", ae("gzip")...)
	w := e.do("POST", "/orders", key, "{}", ae("gzip")...)
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || string(b) != "order 7" {
		t.Fatalf("replayed gzip body %q %v", b, err)
	}
}
