package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// chargeBackend is a deliberately non-idempotent backend: every POST
// /charges charges again. While gate is set, a charge waits for it to
// close after counting (entered is told), as a slow backend would.
type chargeBackend struct {
	srv     *httptest.Server
	charges atomic.Int64
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
	seen    []http.Header // the request headers the backend received
}

func newChargeBackend(t *testing.T) *chargeBackend {
	b := &chargeBackend{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := b.charges.Add(1)
		b.mu.Lock()
		gate, entered := b.gate, b.entered
		b.seen = append(b.seen, r.Header.Clone())
		b.mu.Unlock()
		if entered != nil {
			entered <- struct{}{}
		}
		if gate != nil {
			<-gate
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d,"tenant":%q,"request":%s}`, n, r.Header.Get("X-Tenant"), body)
	})
	mux.HandleFunc("GET /charges", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d", b.charges.Load())
	})
	b.srv = httptest.NewServer(mux) // a real server on loopback
	t.Cleanup(b.srv.Close)
	return b
}

// hold makes the next charges wait, after counting, until the returned
// function is called; each tells entered as it arrives.
func (b *chargeBackend) hold() (entered <-chan struct{}, release func()) {
	gate, ent := make(chan struct{}), make(chan struct{}, 64)
	b.mu.Lock()
	b.gate, b.entered = gate, ent
	b.mu.Unlock()
	var once sync.Once
	return ent, func() { once.Do(func() { close(gate) }) }
}

func (b *chargeBackend) wantCharges(t *testing.T, n int64) {
	t.Helper()
	if got := b.charges.Load(); got != n {
		t.Fatalf("the backend charged %d times, want %d", got, n)
	}
}

// gatewayProc is one run of the command (run), as main runs it, serving
// on a loopback port.
type gatewayProc struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startGateway runs the command with args (and -listen 127.0.0.1:0) until
// the test ends or stop is called.
func startGateway(t *testing.T, d deps, args ...string) *gatewayProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &gatewayProc{cancel: cancel, done: make(chan error, 1), log: &syncBuffer{}}
	addr := make(chan string, 1)
	go func() {
		g.done <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), func(string) string { return "" }, g.log, d,
			func(a string) { addr <- a })
	}()
	select {
	case g.addr = <-addr:
	case err := <-g.done:
		cancel()
		t.Fatalf("the gateway did not start: %v\n%s", err, g.log)
	}
	t.Cleanup(func() {
		if err := g.stop(); err != nil {
			t.Errorf("gateway: %v\n%s", err, g.log)
		}
	})
	return g
}

// stop shuts the gateway down gracefully, as SIGTERM does, and returns
// run's error.
func (g *gatewayProc) stop() error {
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	return <-g.done
}

func (g *gatewayProc) url(path string) string { return "http://" + g.addr + path }

// post sends a POST /charges with key (none when "") and hdr pairs.
func post(ctx context.Context, t *testing.T, base, key, body string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func mustPost(t *testing.T, base, key, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	resp, got, err := post(context.Background(), t, base, key, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, got
}

// storeArgs returns the -store flags of a fresh store of kind for one test.
func storeArgs(t *testing.T, kind string) []string {
	t.Helper()
	switch kind {
	case "memory":
		return []string{"-store", "memory"}
	case "postgres":
		_, table := testenv.PGStoreTable(t, "gw")
		return []string{"-store", testenv.PostgresDSN(t), "-pg-table", table}
	case "mysql":
		_, cfg, table := mysqlenv.StoreTable(t, "gw")
		return []string{"-store", "mysql://" + cfg.FormatDSN(), "-mysql-table", table}
	case "redis":
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		return []string{"-store", "redis://" + testenv.RedisAddr(t) + "/0", "-redis-prefix", "gw:" + hex.EncodeToString(b) + ":"}
	}
	t.Fatalf("store %q", kind)
	return nil
}

// TestChargesOnce: the non-idempotent backend behind the gateway charges
// once per key under a client's retries after lost responses, a client
// that times out and retries, concurrent duplicates, and (durable stores)
// a gateway restart between the first call and the retry.
func TestChargesOnce(t *testing.T) {
	for _, kind := range []string{"memory", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("RetriesAfterLostResponses", func(t *testing.T) { testRetries(t, kind) })
			t.Run("ClientTimeoutThenRetry", func(t *testing.T) { testClientTimeout(t, kind) })
			t.Run("ConcurrentDuplicates", func(t *testing.T) { testConcurrent(t, kind) })
			if kind != "memory" {
				t.Run("RestartBetweenCallAndRetry", func(t *testing.T) { testRestart(t, kind) })
			}
		})
	}
}

func testRetries(t *testing.T, kind string) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, append(storeArgs(t, kind), "-upstream", b.srv.URL, "-tenant-header", "X-Tenant")...)
	lossy := lossyproxy.New(t, g.addr) // the client's network: it loses replies
	base := "http://" + lossy.Addr()
	key := idemhttp.GenerateKey()
	for range 3 { // three responses lost in a row; each retry reaches the gateway
		lossy.DropNextReply()
		if _, _, err := post(context.Background(), t, base, key, `{"amount":100}`, "X-Tenant", "acme"); err == nil {
			t.Fatal("the reply was not lost")
		}
	}
	resp, body := mustPost(t, base, key, `{"amount":100}`, "X-Tenant", "acme")
	if resp.StatusCode != 201 || resp.Header.Get(idemhttp.ReplayedHeader) != "true" || !strings.Contains(body, `"charge":1`) {
		t.Fatalf("retry: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	b.wantCharges(t, 1)
	// The backend saw the client's key and the tenant, as sent.
	if h := b.seen[0]; h.Get(idemhttp.Header) != key || h.Get("X-Tenant") != "acme" {
		t.Fatalf("the backend got %v", h)
	}
	// Another key is another charge; GET passes through, unkeyed.
	mustPost(t, base, idemhttp.GenerateKey(), `{"amount":100}`, "X-Tenant", "acme")
	b.wantCharges(t, 2)
	if resp, err := http.Get(base + "/charges"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", resp, err)
	}
}

// abandoned sends a request whose client gives up (its context is
// cancelled, as by a client timeout) while the backend, held, works on
// it; release lets the backend finish.
func abandoned(t *testing.T, b *chargeBackend, url, key, body string) (release func()) {
	t.Helper()
	entered, release := b.hold()
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := post(ctx, t, url, key, body, "X-Tenant", "acme")
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v, want it cancelled", err)
	}
	return release
}

func testClientTimeout(t *testing.T, kind string) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, append(storeArgs(t, kind), "-upstream", b.srv.URL, "-tenant-header", "X-Tenant", "-wait", "1m")...)
	key := idemhttp.GenerateKey()
	release := abandoned(t, b, g.url(""), key, `{"amount":7}`)
	release() // the backend finishes after the client left
	// The retry waits for the first call (-wait), or finds it stored.
	resp, body := mustPost(t, g.url(""), key, `{"amount":7}`, "X-Tenant", "acme")
	if resp.StatusCode != 201 || resp.Header.Get(idemhttp.ReplayedHeader) != "true" || !strings.Contains(body, `"charge":1`) {
		t.Fatalf("retry: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	b.wantCharges(t, 1)
}

func testConcurrent(t *testing.T, kind string) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, append(storeArgs(t, kind), "-upstream", b.srv.URL, "-tenant-header", "X-Tenant", "-wait", "1m")...)
	entered, release := b.hold()
	key := idemhttp.GenerateKey()
	const n = 16
	var wg sync.WaitGroup
	bodies := make([]string, n)
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			resp, body, err := post(context.Background(), t, g.url(""), key, `{"amount":3}`, "X-Tenant", "acme")
			if err != nil {
				t.Error(err)
				return
			}
			codes[i], bodies[i] = resp.StatusCode, body
		})
	}
	<-entered // one reached the backend; the others wait for it
	release()
	wg.Wait()
	for i := range n {
		if codes[i] != 201 || bodies[i] != bodies[0] {
			t.Fatalf("request %d: %d %s, want 201 %s", i, codes[i], bodies[i], bodies[0])
		}
	}
	b.wantCharges(t, 1)
}

func testRestart(t *testing.T, kind string) {
	b := newChargeBackend(t)
	args := append(storeArgs(t, kind), "-upstream", b.srv.URL, "-tenant-header", "X-Tenant")
	g1 := startGateway(t, deps{}, args...)
	key := idemhttp.GenerateKey()
	release := abandoned(t, b, g1.url(""), key, `{"amount":42}`) // the client never sees the response
	// The gateway is restarted (SIGTERM) while the backend still works:
	// the shutdown waits for the call in flight and stores its response.
	stopped := make(chan error, 1)
	go func() { stopped <- g1.stop() }()
	for !strings.Contains(g1.log.String(), "shutting down") { // the shutdown has begun
		runtime.Gosched()
	}
	release()
	if err := <-stopped; err != nil {
		t.Fatalf("shutdown: %v\n%s", err, g1.log)
	}
	g2 := startGateway(t, deps{}, args...)
	resp, body := mustPost(t, g2.url(""), key, `{"amount":42}`, "X-Tenant", "acme")
	if resp.StatusCode != 201 || resp.Header.Get(idemhttp.ReplayedHeader) != "true" || !strings.Contains(body, `"charge":1`) {
		t.Fatalf("retry after the restart: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	b.wantCharges(t, 1)
	// The same key with another body is refused, across the restart too.
	if resp, _ := mustPost(t, g2.url(""), key, `{"amount":43}`, "X-Tenant", "acme"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("key reused: %d, want 422", resp.StatusCode)
	}
	b.wantCharges(t, 1)
}

// TestTenantHeader: the tenant scopes keys; a keyed request without it is
// refused (403) and reaches no backend.
func TestTenantHeader(t *testing.T) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-tenant-header", "X-Tenant")
	key := idemhttp.GenerateKey()
	_, a := mustPost(t, g.url(""), key, `{}`, "X-Tenant", "acme")
	_, c := mustPost(t, g.url(""), key, `{}`, "X-Tenant", "globex")
	if !strings.Contains(a, `"tenant":"acme"`) || !strings.Contains(c, `"tenant":"globex"`) {
		t.Fatalf("bodies %s, %s", a, c)
	}
	b.wantCharges(t, 2)
	if resp, _ := mustPost(t, g.url(""), key, `{}`); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no tenant: %d, want 403", resp.StatusCode)
	}
	if resp, _ := mustPost(t, g.url(""), "", `{}`, "X-Tenant", "acme"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", resp.StatusCode)
	}
	b.wantCharges(t, 2)
}

// TestRoutes: only the routes of -routes need keys, with the methods of
// -methods; the route pattern is the operation, so one key on two routes
// is two requests.
func TestRoutes(t *testing.T) {
	b := newChargeBackend(t)
	mux := http.NewServeMux()
	var refunds atomic.Int64
	mux.HandleFunc("POST /refunds", func(w http.ResponseWriter, r *http.Request) { refunds.Add(1); w.WriteHeader(201) })
	mux.Handle("/", b.srv.Config.Handler)
	b.srv.Config.Handler = mux
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant", "-routes", "POST /charges")
	key := idemhttp.GenerateKey()
	mustPost(t, g.url(""), key, `{}`)
	mustPost(t, g.url(""), key, `{}`)
	b.wantCharges(t, 1)
	for range 2 { // not a keyed route: passes through, charged each time
		req, _ := http.NewRequest("POST", g.url("/refunds"), strings.NewReader("{}"))
		req.Header.Set(idemhttp.Header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("refund: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	if refunds.Load() != 2 {
		t.Fatalf("%d refunds, want 2 (not a keyed route)", refunds.Load())
	}
}

// TestDerivedKeyFlag: with -derive-window, a client that sends no key is
// deduplicated by the request itself within the window, and told so.
func TestDerivedKeyFlag(t *testing.T) {
	b := newChargeBackend(t)
	var elapsed atomic.Int64 // memstore's clock: it moves only when the test moves it
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(elapsed.Load())) }
	g := startGateway(t, deps{storeClock: now}, "-store", "memory", "-upstream", b.srv.URL, "-tenant-header", "X-Tenant", "-derive-window", "10s", "-upstream-timeout", "5s")
	for i, want := range []string{"", "true"} {
		resp, body := mustPost(t, g.url(""), "", `{"amount": 5}`, "X-Tenant", "acme")
		if resp.StatusCode != 201 || resp.Header.Get(idemhttp.DerivedKeyHeader) != "true" ||
			resp.Header.Get(idemhttp.ReplayedHeader) != want || !strings.Contains(body, `"charge":1`) {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, body)
		}
	}
	b.wantCharges(t, 1)
	elapsed.Add(int64(11 * time.Second)) // after the window: a new charge
	resp, body := mustPost(t, g.url(""), "", `{"amount": 5}`, "X-Tenant", "acme")
	if resp.Header.Get(idemhttp.ReplayedHeader) != "" || !strings.Contains(body, `"charge":2`) {
		t.Fatalf("after the window: %v %s", resp.Header, body)
	}
	b.wantCharges(t, 2)
}

// TestHealthAndReadiness: /healthz answers while the process serves;
// /readyz checks the store (for pgstore, its table) and says why not.
func TestHealthAndReadiness(t *testing.T) {
	b := newChargeBackend(t)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		name   string
		args   func(t *testing.T) []string
		status int
		says   string
	}{
		{"memory", func(*testing.T) []string { return []string{"-store", "memory"} }, 200, "ready"},
		{"postgres", func(t *testing.T) []string { return storeArgs(t, "postgres") }, 200, "ready"},
		{"postgres without its table", func(t *testing.T) []string {
			return []string{"-store", testenv.PostgresDSN(t), "-pg-table", "gw_no_such_table"}
		}, 503, "gw_no_such_table"},
		{"mysql", func(t *testing.T) []string { return storeArgs(t, "mysql") }, 200, "ready"},
		{"mysql without its table", func(t *testing.T) []string {
			_, cfg, _ := mysqlenv.StoreTable(t, "gw")
			return []string{"-store", "mysql://" + cfg.FormatDSN(), "-mysql-table", "gw_no_such_table"}
		}, 503, "gw_no_such_table"},
		{"redis", func(t *testing.T) []string { return storeArgs(t, "redis") }, 200, "ready"},
		{"redis unreachable", func(*testing.T) []string { return []string{"-store", "redis://127.0.0.1:1/0"} }, 503, "store redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, deps{}, append(tc.args(t), "-upstream", b.srv.URL, "-single-tenant")...)
			if code, body := get(g.url("/healthz")); code != 200 {
				t.Fatalf("/healthz: %d %s", code, body)
			}
			if code, body := get(g.url("/readyz")); code != tc.status || !strings.Contains(body, tc.says) {
				t.Fatalf("/readyz: %d %q, want %d saying %q", code, body, tc.status, tc.says)
			}
		})
	}
}

// TestReadyzWhileDraining: once shutdown began, /readyz answers 503.
func TestReadyzWhileDraining(t *testing.T) {
	c, err := parseConfig([]string{"-store", "memory", "-upstream", "http://127.0.0.1:1", "-single-tenant"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(context.Background(), c, discardLog(), deps{})
	if err != nil {
		t.Fatal(err)
	}
	g.draining.Store(true)
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 503 || !strings.Contains(w.Body.String(), "shutting down") {
		t.Fatalf("/readyz while draining: %d %q", w.Code, w.Body)
	}
}

// TestUpstreamFailure: when the backend's connection breaks after it
// received the request (it may have acted), the gateway answers 502
// upstream-failed; by default (-unknown-outcome keep) the key stays
// decided and the retry is refused, so the backend never runs twice; with
// -unknown-outcome release the retry reaches the backend again.
func TestUpstreamFailure(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		retry    int // the retries' status
		wantRuns int64
	}{
		{"keep", http.StatusInternalServerError, 1},
		{"release", http.StatusCreated, 2},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var attempts atomic.Int64
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attempts.Add(1) == 1 {
					panic(http.ErrAbortHandler) // the connection breaks after the request arrived
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"attempt":%d}`, attempts.Load())
			}))
			backend.Config.ErrorLog = discardStdLog()
			t.Cleanup(backend.Close)
			g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant", "-unknown-outcome", tc.mode)
			key := idemhttp.GenerateKey()
			resp, body := mustPost(t, g.url(""), key, `{}`)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "upstream-failed") {
				t.Fatalf("first: %d %s, want 502 upstream-failed", resp.StatusCode, body)
			}
			if tc.mode == "keep" && resp.Header.Get(idemhttp.NotStoredHeader) != "outcome-unknown" {
				t.Fatalf("first: %s %q, want outcome-unknown", idemhttp.NotStoredHeader, resp.Header.Get(idemhttp.NotStoredHeader))
			}
			for i := range 2 {
				resp, body = mustPost(t, g.url(""), key, `{}`)
				replayed := resp.Header.Get(idemhttp.ReplayedHeader)
				switch {
				case tc.retry == 500 && (resp.StatusCode != 500 || !strings.Contains(body, "response-not-replayable")):
					t.Fatalf("retry %d: %d %s; want 500 response-not-replayable", i, resp.StatusCode, body)
				case tc.retry == 201 && (resp.StatusCode != 201 || (replayed == "true") != (i == 1)):
					t.Fatalf("retry %d: %d %v %s; want 201, replayed on the second", i, resp.StatusCode, resp.Header, body)
				}
			}
			if got := attempts.Load(); got != tc.wantRuns {
				t.Fatalf("the backend received %d requests, want %d", got, tc.wantRuns)
			}
		})
	}
}
