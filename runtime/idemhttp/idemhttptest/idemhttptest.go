// Package idemhttptest is the conformance suite of idemhttp's semantics
// over HTTP: every adapter of idemhttp to a web framework (net/http itself,
// gin, echo, Fiber) runs it, through the framework's real server on
// loopback, on every store.
//
// An adapter provides a Mount: given an executor, idemhttp options and a
// net/http handler, it serves the handler through the framework, behind
// the adapter's middleware, and returns the server's base URL. The handler
// is mounted the framework's own way (gin.WrapH, echo.WrapHandler, Fiber's
// adaptor.HTTPHandler), so that the framework's response path is the one
// under test; adapters test their framework's native handlers (c.JSON,
// returned errors) in their own tests.
//
// The suite checks, by the responses a client gets and by how many times
// the handler ran: the key rules (400 missing-key, invalid-key), byte-for-
// byte replay with Idempotent-Replayed, the stored-header allow-list and
// the fields never stored, 422 key-reused, 409 request-in-progress with
// Retry-After, the status policy, tenancy (required by the constructor;
// 403 missing-tenant; keys scoped by tenant), body limits (413), 503
// store-unavailable, streaming, responses over the storage limit (sent
// marked Idempotent-Not-Stored, the retry refused, never run again), an
// outcome the handler says is unknown, a hijacked connection (not stored),
// panicking and aborted handlers, a client that goes away, and concurrent
// duplicates running once. Every refusal is RFC 9457 problem+json naming
// its rule.
//
// It also runs issue 33's table, one tenant from the door to the record
// (TenantDoorToRecord, tenancy.go): the wrappers' executor tenancies × the
// door's own executor or another × the door's tenancy, two tenants paying
// one order under different keys, a business key in flight
// (TenantBusinessKeyInFlight), and requests the door passes through
// unprotected (TenantPassThrough). A door joins the table by running Run. For
// the framework's native handlers, an adapter calls CheckTenantsApart with
// an Orders service.
//
// And the table of a client that retries on its own in front of the door
// (RetryingClient, retryclient.go; RetryingTransport): a timeout shorter
// than the handler, a retry while the handler runs, a connection reset
// after the handler ran, each with the key given and derived, by two
// tenants: one run per tenant, the first answer replayed, never the other
// tenant's.
//
// It depends on the standard library, the runtime and internal/lossyproxy
// (a TCP proxy built on the standard library alone).
package idemhttptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// Paths are the paths the suite sends requests to; a Mount routes each of
// them, for every method, to the handler.
var Paths = []string{"/orders", "/payments", "/things"}

// Config is what a Mount serves.
type Config struct {
	// Executor is the executor the adapter's middleware uses.
	Executor *idem.Executor
	// Options are the idemhttp options of the middleware, the tenancy
	// among them (or, in one test, missing: the adapter's constructor must
	// then panic, as idemhttp.New does).
	Options []idemhttp.Option
	// Handler is the application's handler; the suite counts its runs.
	Handler http.Handler
	// Paths are the paths to route to Handler, for every method (Paths).
	Paths []string
}

// Mount serves cfg through a framework's server on loopback and returns its
// base URL ("http://127.0.0.1:port"); it stops the server when t ends. It
// builds the adapter's middleware before it returns, in the calling
// goroutine, so that a panic of the constructor reaches the caller. A panic
// of the handler must be recovered the framework's way (its recovery
// middleware, or net/http's per-connection recovery).
type Mount func(t *testing.T, cfg Config) string

// Options configure Run.
type Options struct {
	// NewStore returns a store for one test; stores it returns may share a
	// server, as the suite uses fresh keys everywhere.
	NewStore func(t *testing.T) idem.Store
	// Mount serves the adapter under test.
	Mount Mount
	// OneWriter says that the stores NewStore returns run one
	// transactional call at a time (sqlitestore.NewTx: SQLite's one write
	// lock, held while the method runs, bounded by the store's lock
	// timeout, which NewStore should set short). The tests that hold one
	// call in flight while another claims a key of its own
	// (TenantBusinessKeyInFlight) then expect what such a store documents
	// for the second call: 503 store-full with Retry-After, nothing run,
	// and the retry, once the first call ended, answered as it would have
	// been.
	OneWriter bool
}

// Run runs the suite, each test in parallel.
func Run(t *testing.T, o Options) {
	if o.NewStore == nil || o.Mount == nil {
		t.Fatal("idemhttptest.Run: NewStore and Mount are required")
	}
	s := &suite{o: o}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"KeyRules", s.testKeyRules},
		{"ReplayByteForByte", s.testReplayByteForByte},
		{"StoredHeadersAllowList", s.testStoredHeaders},
		{"KeyReused422", s.testKeyReused},
		{"InFlight409", s.testInFlight},
		{"StatusPolicy", s.testStatusPolicy},
		{"TenancyRequired", s.testTenancyRequired},
		{"TenantScope", s.testTenantScope},
		{"TenantDoorToRecord", s.testTenancyTable},
		{"TenantBusinessKeyInFlight", s.testTenancyInFlight},
		{"TenantPassThrough", s.testTenancyPassThrough},
		{"BodyLimit413", s.testBodyLimit},
		{"StoreDown503", s.testStoreDown},
		{"Streaming", s.testStreaming},
		{"ResponseOverStorageLimit", s.testResponseTooLarge},
		{"OutcomeUnknownKeepsKey", s.testOutcomeUnknown},
		{"HijackNotStored", s.testHijack},
		{"PanicReleases", s.testPanic},
		{"AbortedHandlerReleases", s.testAborted},
		{"ClientGoneThenRetry", s.testClientGone},
		{"ConcurrentDuplicatesRunOnce", s.testConcurrent},
		{"OtherMethodsPassThrough", s.testOtherMethods},
		{"NoRouteKeepsFrameworkStatus", s.testNoRoute},
		{"RetryingClient", s.testRetryingClient},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct{ o Options }

// env is one mounted handler and a client of it.
type env struct {
	t    *testing.T
	url  string
	c    *http.Client
	runs atomic.Int64
	// stored receives a value each time the executor stores an outcome
	// (idem.EventCompleted): tests wait on it, not on the clock.
	stored chan struct{}
}

// hangGuard bounds the suite's waits for an event: it only turns a hang
// into a failure, far longer than any scheduling delay.
const hangGuard = 2 * time.Minute

// handlerFunc is a test's handler; run is the 1-based number of this run.
type handlerFunc func(w http.ResponseWriter, r *http.Request, run int64)

// mount serves h single-tenant (idemhttp.SingleTenant) with opts.
func (s *suite) mount(t *testing.T, h handlerFunc, opts ...idemhttp.Option) *env {
	t.Helper()
	return s.mountStore(t, s.o.NewStore(t), h, append([]idemhttp.Option{idemhttp.SingleTenant()}, opts...)...)
}

// mountStore serves h on store with exactly opts.
func (s *suite) mountStore(t *testing.T, store idem.Store, h handlerFunc, opts ...idemhttp.Option) *env {
	t.Helper()
	e := &env{t: t, stored: make(chan struct{}, 64)}
	ex := idem.NewExecutor(store, idem.SingleTenant(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventCompleted {
			select {
			case e.stored <- struct{}{}:
			default: // no test waits for that many
			}
		}
	}))
	e.url = s.o.Mount(t, Config{
		Executor: ex,
		Options:  opts,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h(w, r, e.runs.Add(1))
		}),
		Paths: Paths,
	})
	// A connection per request: net/http's client resends a request with
	// an Idempotency-Key on its own when a reused connection breaks, which
	// would make the runs counted here depend on connection reuse.
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	e.c = &http.Client{Transport: tr}
	return e
}

// resp is what the client got.
type resp struct {
	status  int
	header  http.Header
	trailer http.Header
	body    []byte
}

// send sends one request: key "" sends no Idempotency-Key; hdr are more
// header fields, name and value pairs.
func (e *env) send(method, path, key, body string, hdr ...string) resp {
	e.t.Helper()
	r, err := e.sendCtx(context.Background(), method, path, key, body, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) sendCtx(ctx context.Context, method, path, key, body string, hdr ...string) (resp, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	if err != nil {
		return resp{}, err
	}
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := e.c.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	return resp{status: res.StatusCode, header: res.Header, trailer: res.Trailer, body: b}, nil
}

func (e *env) wantRuns(n int64) {
	e.t.Helper()
	if got := e.runs.Load(); got != n {
		e.t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// want checks the status, the body and whether the response is a replay.
func want(t *testing.T, r resp, status int, body string, replayed bool) {
	t.Helper()
	if r.status != status || string(r.body) != body {
		t.Fatalf("got %d %q, want %d %q", r.status, r.body, status, body)
	}
	if got := r.header.Get(idemhttp.ReplayedHeader) == "true"; got != replayed {
		t.Fatalf("%s: %q, want replayed=%v", idemhttp.ReplayedHeader, r.header.Get(idemhttp.ReplayedHeader), replayed)
	}
}

// wantProblem checks an RFC 9457 problem response naming rule.
func wantProblem(t *testing.T, r resp, status int, rule string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %q", r.status, status, rule, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != status || !strings.HasSuffix(p.Type, "#"+rule) || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d, type ending #%s, a title and a detail", p, status, rule)
	}
	if r.header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("a refusal says %s", idemhttp.ReplayedHeader)
	}
}

// text answers status with "run N".
func text(status int) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, run int64) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, "run %d", run)
	}
}

func (s *suite) testKeyRules(t *testing.T) {
	e := s.mount(t, text(201))
	wantProblem(t, e.send("POST", "/orders", "", "{}"), 400, "missing-key")
	for name, v := range map[string]string{
		"empty":      " ",
		"too long":   strings.Repeat("k", 256),
		"not ASCII":  "clé",
		"bad string": `"unterminated`,
	} {
		r, err := e.sendCtx(context.Background(), "POST", "/orders", "", "{}", idemhttp.Header, v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantProblem(t, r, 400, "invalid-key")
	}
	wantProblem(t, e.send("POST", "/orders", "", "{}", idemhttp.Header, "a", idemhttp.Header, "b"), 400, "invalid-key")
	e.wantRuns(0)

	// A bare key and its structured-field string are one key.
	key := idemhttp.GenerateKey()
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 1", false)
	want(t, e.send("POST", "/orders", idemhttp.FormatKey(key), "{}"), 201, "run 1", true)
	long := key + strings.Repeat("k", 255-len(key)) // the longest key; fresh, as the store outlives the test
	want(t, e.send("POST", "/orders", long, "{}"), 201, "run 2", false)
	want(t, e.send("POST", "/orders", long, "{}"), 201, "run 2", true)
	// And the other way round: the structured-field string first.
	quoted := idemhttp.GenerateKey()
	want(t, e.send("POST", "/orders", idemhttp.FormatKey(quoted), "{}"), 201, "run 3", false)
	want(t, e.send("POST", "/orders", quoted, "{}"), 201, "run 3", true)
	e.wantRuns(3)
}

// rich sets allow-listed, other and credential header fields and writes
// every byte value.
func rich(w http.ResponseWriter, r *http.Request, run int64) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Location", "/orders/42")
	h.Set("ETag", `"v1"`)
	h.Set("Cache-Control", "private")
	h.Add("Link", `</a>; rel="a"`)
	h.Add("Link", `</b>; rel="b"`)
	h.Set("X-Request-Id", "req-"+strconv.FormatInt(run, 10))
	h.Set("Set-Cookie", "session=secret; HttpOnly")
	h.Set("Authorization", "Bearer secret")
	h.Set("WWW-Authenticate", `Bearer realm="x"`)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(everyByte()[:100])
	_, _ = w.Write(everyByte()[100:])
}

func everyByte() []byte {
	b := make([]byte, 3*256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func (s *suite) testReplayByteForByte(t *testing.T) {
	e := s.mount(t, rich)
	key := idemhttp.GenerateKey()
	first := e.send("POST", "/orders?x=1", key, `{"item":"book"}`)
	second := e.send("POST", "/orders?x=1", key, `{"item":"book"}`)
	e.wantRuns(1)
	want(t, first, 201, string(everyByte()), false)
	want(t, second, 201, string(everyByte()), true)
	for _, k := range []string{"Content-Type", "Location", "ETag", "Cache-Control", "Link"} {
		if a, b := first.header.Values(k), second.header.Values(k); strings.Join(a, "\n") != strings.Join(b, "\n") || len(a) == 0 {
			t.Errorf("header %s: first %q, replay %q", k, a, b)
		}
	}
	if a, b := first.header.Get("Content-Length"), second.header.Get("Content-Length"); a != "768" || b != "768" {
		t.Errorf("Content-Length: first %q, replay %q, want 768", a, b)
	}
	if first.header.Get("X-Request-Id") != "req-1" || first.header.Get("Set-Cookie") == "" {
		t.Errorf("the first response lost its own fields: %v", first.header)
	}
	for _, k := range []string{"X-Request-Id", "Set-Cookie", "Authorization", "Www-Authenticate"} {
		if v := second.header.Values(k); len(v) != 0 {
			t.Errorf("replayed %s (not allow-listed): %q", k, v)
		}
	}
}

func (s *suite) testStoredHeaders(t *testing.T) {
	// Even when a careless allow-list names them, credentials are not
	// stored.
	e := s.mount(t, rich, idemhttp.WithStoredHeaders("Content-Type", "X-Request-Id", "Set-Cookie", "Authorization", "WWW-Authenticate"))
	key := idemhttp.GenerateKey()
	e.send("POST", "/orders", key, "u=a")
	second := e.send("POST", "/orders", key, "u=a")
	want(t, second, 201, string(everyByte()), true)
	if got := second.header.Get("X-Request-Id"); got != "req-1" {
		t.Errorf("allow-listed X-Request-Id replayed as %q", got)
	}
	for _, k := range []string{"Set-Cookie", "Authorization", "Www-Authenticate", "Location", "Etag"} {
		if v := second.header.Values(k); len(v) != 0 {
			t.Errorf("replayed %s: %q", k, v)
		}
	}
}

func (s *suite) testKeyReused(t *testing.T) {
	e := s.mount(t, text(201))
	key := idemhttp.GenerateKey()
	want(t, e.send("POST", "/orders", key, `{"amount":1}`), 201, "run 1", false)
	wantProblem(t, e.send("POST", "/orders", key, `{"amount":2}`), 422, "key-reused")
	wantProblem(t, e.send("POST", "/orders?dry=1", key, `{"amount":1}`), 422, "key-reused")
	want(t, e.send("POST", "/orders", key, `{"amount":1}`), 201, "run 1", true)
	e.wantRuns(1)
}

// blocking answers 201 once release is closed, after telling started.
func blocking(started chan<- struct{}, release <-chan struct{}) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, run int64) {
		started <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "run %d", run)
	}
}

// closer closes ch once, on success or failure.
func closer(t *testing.T, ch chan struct{}) func() {
	var once sync.Once
	f := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(f)
	return f
}

func (s *suite) testInFlight(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	unblock := closer(t, release)
	e := s.mount(t, blocking(started, release))
	key := idemhttp.GenerateKey()
	done := make(chan resp, 1)
	go func() {
		r, err := e.sendCtx(context.Background(), "POST", "/orders", key, "{}")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	<-started
	second := e.send("POST", "/orders", key, "{}")
	wantProblem(t, second, 409, "request-in-progress")
	if n, err := strconv.Atoi(second.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", second.header.Get("Retry-After"))
	}
	unblock()
	want(t, <-done, 201, "run 1", false)
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 1", true)
	e.wantRuns(1)
}

func (s *suite) testStatusPolicy(t *testing.T) {
	for _, tc := range []struct {
		status int
		stored bool
	}{{200, true}, {201, true}, {303, true}, {400, true}, {404, true}, {409, false}, {429, false}, {500, false}, {503, false}} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			e := s.mount(t, text(tc.status))
			key := idemhttp.GenerateKey()
			want(t, e.send("POST", "/orders", key, "{}"), tc.status, "run 1", false)
			if tc.stored {
				want(t, e.send("POST", "/orders", key, "{}"), tc.status, "run 1", true)
				e.wantRuns(1)
			} else {
				want(t, e.send("POST", "/orders", key, "{}"), tc.status, "run 2", false)
				e.wantRuns(2)
			}
		})
	}
	for _, status := range []int{201, 409, 429, 500, 503} {
		t.Run(fmt.Sprintf("StoreAll/%d", status), func(t *testing.T) {
			e := s.mount(t, text(status), idemhttp.WithPolicy(idemhttp.StoreAll))
			key := idemhttp.GenerateKey()
			want(t, e.send("POST", "/orders", key, "{}"), status, "run 1", false)
			want(t, e.send("POST", "/orders", key, "{}"), status, "run 1", true)
			e.wantRuns(1)
		})
	}
}

func (s *suite) testTenancyRequired(t *testing.T) {
	defer func() {
		msg := fmt.Sprint(recover())
		if !strings.Contains(msg, "no tenancy chosen") {
			t.Fatalf("building the middleware without a tenancy: panic %q, want idemhttp's no-tenancy panic", msg)
		}
	}()
	s.mountStore(t, s.o.NewStore(t), text(201))
}

// tenantHeader names the tenant by a header field an authenticating proxy
// would set.
func tenantHeader(r *http.Request) string { return r.Header.Get("X-Tenant") }

func (s *suite) testTenantScope(t *testing.T) {
	e := s.mountStore(t, s.o.NewStore(t), text(201), idemhttp.WithTenant(tenantHeader))
	key := idemhttp.GenerateKey()
	wantProblem(t, e.send("POST", "/orders", key, "{}"), 403, "missing-tenant")
	e.wantRuns(0)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", "a"), 201, "run 1", false)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", "b"), 201, "run 2", false)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", "a"), 201, "run 1", true)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", "b"), 201, "run 2", true)
	for range 2 {
		wantProblem(t, e.send("POST", "/orders", key, "{}", "X-Tenant", strings.Repeat("t", idem.MaxTenantLen+1)), 400, "scope-too-long")
	}
	e.wantRuns(2)
	// A tenant at the limit is served, and replayed.
	longest := strings.Repeat("t", idem.MaxTenantLen)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", longest), 201, "run 3", false)
	want(t, e.send("POST", "/orders", key, "{}", "X-Tenant", longest), 201, "run 3", true)
	e.wantRuns(3)
}

func (s *suite) testBodyLimit(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request, run int64) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("handler reading the body: %v", err)
		}
		w.WriteHeader(201)
		_, _ = w.Write(b)
	}
	e := s.mount(t, echo, idemhttp.WithMaxBody(16))
	key := idemhttp.GenerateKey()
	wantProblem(t, e.send("POST", "/orders", key, strings.Repeat("x", 17)), 413, "request-too-large")
	e.wantRuns(0)
	body := `{"n":"123456789"}`[:16]
	want(t, e.send("POST", "/orders", key, body), 201, body, false)
	want(t, e.send("POST", "/orders", key, body), 201, body, true)
	e.wantRuns(1)
}

// downStore is a store whose server cannot be reached: every call fails.
type downStore struct{ idem.Store }

var errDown = errors.New("dial tcp 127.0.0.1:1: connection refused")

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, errDown
}

func (s *suite) testStoreDown(t *testing.T) {
	e := s.mountStore(t, downStore{s.o.NewStore(t)}, text(201), idemhttp.SingleTenant())
	r := e.send("POST", "/orders", idemhttp.GenerateKey(), "{}")
	wantProblem(t, r, 503, "store-unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on 503")
	}
	e.wantRuns(0)
}

func (s *suite) testStreaming(t *testing.T) {
	e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "part one, ")
		if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("flush: %v", err)
		}
		_, _ = fmt.Fprintf(w, "part two of run %d", run)
	})
	key := idemhttp.GenerateKey()
	want(t, e.send("POST", "/orders", key, "{}"), 200, "part one, part two of run 1", false)
	want(t, e.send("POST", "/orders", key, "{}"), 200, "part one, part two of run 1", true)
	e.wantRuns(1)
}

// testResponseTooLarge: a response over WithMaxResponse is sent to the
// first client marked Idempotent-Not-Stored (a header field when it was
// known before anything was sent, else a trailer), and the key is kept
// decided: the retry gets 500 response-not-replayable, never a second run.
func (s *suite) testResponseTooLarge(t *testing.T) {
	big := strings.Repeat("b", 64)
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flush), func(t *testing.T) {
			e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
				w.WriteHeader(201)
				_, _ = io.WriteString(w, big[:30])
				if flush {
					_ = http.NewResponseController(w).Flush()
				}
				_, _ = io.WriteString(w, big[30:])
			}, idemhttp.WithMaxResponse(32))
			key := idemhttp.GenerateKey()
			first := e.send("POST", "/orders", key, "{}")
			want(t, first, 201, big, false)
			marked := first.header.Get(idemhttp.NotStoredHeader)
			if marked == "" {
				marked = first.trailer.Get(idemhttp.NotStoredHeader)
			}
			if marked != "too-large" && !(flush && e.noStreaming(first)) {
				t.Fatalf("%s: %q (header %v, trailer %v), want too-large", idemhttp.NotStoredHeader, marked, first.header, first.trailer)
			}
			for range 2 {
				wantProblem(t, e.send("POST", "/orders", key, "{}"), 500, "response-not-replayable")
			}
			e.wantRuns(1)
		})
	}
}

// noStreaming reports whether the door sent r without streaming it (a
// Flush sent nothing early, as on Fiber): it then had the whole response
// before sending, and the header field must be there.
func (e *env) noStreaming(r resp) bool {
	return r.header.Get("Content-Length") != "" && r.header.Get(idemhttp.NotStoredHeader) != ""
}

// testOutcomeUnknown: a handler that says the outcome of its request is
// unknown (idemhttp.OutcomeUnknown: a proxy whose upstream broke the
// connection after receiving the request) has its response sent marked
// Idempotent-Not-Stored: outcome-unknown, and the key kept decided: the
// retry is refused, never a second run. A door whose handlers do not
// write through idemhttp's writer (Fiber's net/http adaptor) skips it.
func (s *suite) testOutcomeUnknown(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("aborted=%v", abort), func(t *testing.T) {
			var unsupported atomic.Bool
			e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
				if !idemhttp.OutcomeUnknown(w) {
					unsupported.Store(true)
				}
				w.WriteHeader(http.StatusBadGateway)
				_, _ = io.WriteString(w, "upstream broke")
				if abort {
					// An upstream that broke mid-body: the response is cut.
					_ = http.NewResponseController(w).Flush()
					panic(http.ErrAbortHandler)
				}
			})
			key := idemhttp.GenerateKey()
			first, err := e.sendCtx(context.Background(), "POST", "/orders", key, "{}")
			if unsupported.Load() {
				t.Skip("the door's handlers do not write through idemhttp's writer")
			}
			if !abort {
				if err != nil {
					t.Fatal(err)
				}
				want(t, first, 502, "upstream broke", false)
				if got := first.header.Get(idemhttp.NotStoredHeader); got != "outcome-unknown" {
					t.Fatalf("%s: %q, want outcome-unknown", idemhttp.NotStoredHeader, got)
				}
			} else if err == nil && first.header.Get(idemhttp.ReplayedHeader) != "" {
				t.Fatalf("an aborted response was a replay: %d %q", first.status, first.body)
			}
			wantProblem(t, e.send("POST", "/orders", key, "{}"), 500, "response-not-replayable")
			e.wantRuns(1)
		})
	}
}

// testHijack: a handler that hijacks the connection answers on it itself;
// nothing is stored and the key is released (idemhttp.ErrHijacked), so no
// client gets an empty or made-up response, and the retry runs again. A
// door that cannot hijack through net/http skips it (Fiber tests its own
// hijack).
func (s *suite) testHijack(t *testing.T) {
	var unsupported atomic.Bool
	e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			unsupported.Store(true)
			w.WriteHeader(http.StatusNotImplemented)
			return
		}
		defer conn.Close()
		body := fmt.Sprintf("run %d", run)
		_, _ = fmt.Fprintf(rw, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		_ = rw.Flush()
	}, idemhttp.WithWait(hangGuard)) // the client has its answer before the key is released: the retry waits for that

	key := idemhttp.GenerateKey()
	for run := int64(1); run <= 2; run++ {
		r := e.send("POST", "/orders", key, "{}")
		if unsupported.Load() {
			t.Skip("the door's handlers cannot hijack through net/http")
		}
		want(t, r, 201, fmt.Sprintf("run %d", run), false)
	}
	e.wantRuns(2)
}

// wantFailed checks the answer to a request whose handler panicked: no
// response (net/http closes the connection) or a 5xx (a framework's
// recovery), never a stored or replayed one.
func wantFailed(t *testing.T, r resp, err error) {
	t.Helper()
	if err == nil && (r.status < 500 || r.header.Get(idemhttp.ReplayedHeader) != "") {
		t.Fatalf("a panicking handler answered %d %q %v", r.status, r.body, r.header)
	}
}

func (s *suite) testPanic(t *testing.T) {
	e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
		if run == 1 {
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "half")
			panic("idemhttptest: the handler fails")
		}
		text(201)(w, r, run)
	})
	key := idemhttp.GenerateKey()
	r, err := e.sendCtx(context.Background(), "POST", "/orders", key, "{}")
	wantFailed(t, r, err)
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 2", false)
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 2", true)
	e.wantRuns(2)
}

func (s *suite) testAborted(t *testing.T) {
	e := s.mount(t, func(w http.ResponseWriter, r *http.Request, run int64) {
		if run == 1 {
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "part")
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		text(201)(w, r, run)
	})
	key := idemhttp.GenerateKey()
	// What the client of the aborted request sees is the framework's:
	// net/http breaks the connection, gin's recovery ends the response as
	// if it were complete. It is never a replay, and the key is released.
	r, err := e.sendCtx(context.Background(), "POST", "/orders", key, "{}")
	if err == nil && r.header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("an aborted request got a replay: %d %q", r.status, r.body)
	}
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 2", false)
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 2", true)
	e.wantRuns(2)
}

func (s *suite) testClientGone(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	unblock := closer(t, release)
	e := s.mount(t, blocking(started, release))
	key := idemhttp.GenerateKey()
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	go func() {
		_, err := e.sendCtx(ctx, "POST", "/orders", key, "{}")
		failed <- err
	}()
	<-started
	cancel()
	if err := <-failed; err == nil {
		t.Fatal("the cancelled request got an answer")
	}
	// Until the handler returned, a retry gets 409.
	wantProblem(t, e.send("POST", "/orders", key, "{}"), 409, "request-in-progress")
	unblock()
	// The handler runs to its end and its response is stored: the retry
	// after that is a replay, however long storing it took.
	select {
	case <-e.stored:
	case <-time.After(hangGuard):
		t.Fatalf("the first response was not stored within %v", hangGuard)
	}
	want(t, e.send("POST", "/orders", key, "{}"), 201, "run 1", true)
	e.wantRuns(1)
}

func (s *suite) testConcurrent(t *testing.T) {
	const n = 32
	e := s.mount(t, text(201))
	key := idemhttp.GenerateKey()
	var wg sync.WaitGroup
	rs := make([]resp, n)
	errs := make([]error, n)
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			rs[i], errs[i] = e.sendCtx(context.Background(), "POST", "/orders", key, `{"n":1}`)
		})
	}
	close(gate)
	wg.Wait()
	fresh := 0
	for i, r := range rs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch {
		case r.status == 409:
			wantProblem(t, r, 409, "request-in-progress")
		case r.status == 201 && bytes.Equal(r.body, []byte("run 1")):
			if r.header.Get(idemhttp.ReplayedHeader) == "" {
				fresh++
			}
		default:
			t.Fatalf("a duplicate got %d %q", r.status, r.body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d first responses, want 1", fresh)
	}
	e.wantRuns(1)
}

func (s *suite) testOtherMethods(t *testing.T) {
	e := s.mount(t, text(200))
	want(t, e.send("GET", "/things", "", ""), 200, "run 1", false)
	want(t, e.send("GET", "/things", "k", ""), 200, "run 2", false)
	want(t, e.send("PUT", "/things", "", "{}"), 200, "run 3", false)
	key := idemhttp.GenerateKey()
	want(t, e.send("PATCH", "/things", key, "{}"), 200, "run 4", false)
	want(t, e.send("PATCH", "/things", key, "{}"), 200, "run 4", true)
	// The operation is the method and the route: another path is another
	// key space.
	want(t, e.send("PATCH", "/payments", key, "{}"), 200, "run 5", false)
	e.wantRuns(5)
}

// testNoRoute: a keyed POST to a path no route matches gets the
// framework's own "not found" status, first and on a retry, never a 2xx
// the middleware made up (gin sets its 404 on its writer before the chain
// runs: a writer that started at 200 answered, and stored, "200" with an
// empty body).
func (s *suite) testNoRoute(t *testing.T) {
	e := s.mount(t, text(201))
	key := idemhttp.GenerateKey()
	first := e.send("POST", "/nowhere", key, "{}")
	if first.status != http.StatusNotFound {
		t.Fatalf("a path no route matches: %d %q, want 404", first.status, first.body)
	}
	again := e.send("POST", "/nowhere", key, "{}")
	if again.status != http.StatusNotFound || string(again.body) != string(first.body) {
		t.Fatalf("its retry: %d %q, want 404 %q", again.status, again.body, first.body)
	}
	e.wantRuns(0)
}

// Response is what a client got: Send's result.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Send sends one request with c (http.DefaultClient if nil) and reads the
// response whole, for an adapter's own tests: key "" sends no
// Idempotency-Key; hdr are more header fields, as name, value pairs
// ("X-Tenant", "acme"). A transport error fails t.
func Send(t testing.TB, c *http.Client, method, url, key, body string, hdr ...string) Response {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr)%2 != 0 {
		t.Fatalf("idemhttptest.Send: header fields come in name, value pairs: %q", hdr)
	}
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
}
