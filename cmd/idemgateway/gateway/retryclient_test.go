package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// retryBackend is a backend that counts its runs by tenant and, by mode,
// answers (201 "receipt of T (run N)"), holds its answer until the test
// releases it, or reads the request and breaks the connection (it acted,
// and said nothing).
type retryBackend struct {
	url     string
	mode    string // "answer", "hold", "break"
	mu      sync.Mutex
	runs    map[string]int
	entered chan string
	release chan struct{}
}

func newRetryBackend(t *testing.T, mode string) *retryBackend {
	b := &retryBackend{mode: mode, runs: map[string]int{}, entered: make(chan string, 8), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tenant := r.Header.Get("X-Tenant")
		b.mu.Lock()
		b.runs[tenant]++
		n := b.runs[tenant]
		b.mu.Unlock()
		switch b.mode {
		case "hold":
			b.entered <- tenant
			<-b.release
		case "break":
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			_ = c.Close()
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "receipt of %s (run %d)", tenant, n)
	}))
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(b.release) }); srv.Close() })
	b.url = srv.URL
	return b
}

// TestRetryingClient: a client that retries on its own
// (idemhttptest.RetryingTransport: after a transport error, a 429 or a 5xx,
// the same request again) in front of the gateway, with the key given and
// derived (-derive-window), by two tenants (-tenant-header) sending
// identical requests. Triggers:
//
//   - ClientTimeout: the client's attempt ends while the backend works; the
//     retry gets the first answer, replayed (or 409 request-in-progress
//     while it is not stored yet: the client stops, and calls again);
//   - ResetAfterRun: the gateway's answer is lost on the client's network
//     (a proxy drops it); the retry gets it, replayed;
//   - UpstreamBroke: the backend acted and broke the connection: 502
//     upstream-failed, a 5xx the client retries, and every retry 500
//     response-not-replayable (the key is kept: -unknown-outcome keep);
//   - UpstreamTimeout: the backend outlasts -upstream-timeout: 504, then
//     500 response-not-replayable on every retry.
//
// In every cell, on every store of the gateway (memory, postgres, mysql,
// redis: real servers), the backend runs once per tenant, however often
// the client resends, and no tenant gets the other's receipt. The
// gateway's own transport resends nothing (TestNothingBelowResends).
func TestRetryingClient(t *testing.T) {
	for _, kind := range []string{"memory", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, trigger := range []string{"ClientTimeout", "ResetAfterRun", "UpstreamBroke", "UpstreamTimeout"} {
				for _, derived := range []bool{false, true} {
					name := trigger + "/KeyGiven"
					if derived {
						name = trigger + "/KeyDerived"
					}
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						retryCell(t, kind, trigger, derived)
					})
				}
			}
		})
	}
}

func retryCell(t *testing.T, kind, trigger string, derived bool) {
	mode := map[string]string{"ClientTimeout": "hold", "ResetAfterRun": "answer", "UpstreamBroke": "break", "UpstreamTimeout": "hold"}[trigger]
	b := newRetryBackend(t, mode)
	args := append(storeArgs(t, kind), "-upstream", b.url, "-tenant-header", "X-Tenant", "-routes", "POST /charges", "-derive-window", "1m")
	if trigger == "UpstreamTimeout" {
		// The backend holds its answer until the test ends: the gateway's
		// timeout runs out whatever the machine's speed.
		args = append(args, "-upstream-timeout", "200ms")
	}
	g := startGateway(t, deps{}, args...)
	target := g.url("/charges")
	var proxy *lossyproxy.Proxy
	if trigger == "ResetAfterRun" {
		proxy = lossyproxy.New(t, g.addr)
		target = "http://" + proxy.Addr() + "/charges"
	}
	key := ""
	if !derived {
		key = idemhttp.GenerateKey() // one key for both tenants: the gateway scopes it
	}
	body := `{"amount":5}`
	for _, tn := range []string{"acme", "globex"} {
		rt := &idemhttptest.RetryingTransport{Attempts: 4}
		rt.AttemptContext = func(ctx context.Context, n int) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, hangGuard)
			if n == 1 && trigger == "ClientTimeout" { // shorter than the backend
				go func() {
					select {
					case <-b.entered:
						cancel()
					case <-ctx.Done():
					}
				}()
			}
			return ctx, cancel
		}
		rt.BeforeRetry = func(n, status int, err error) {
			if n == 2 && trigger == "ClientTimeout" {
				b.release <- struct{}{} // this tenant's run answers
			}
		}
		if proxy != nil {
			proxy.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, []byte("\r\nX-Tenant: "+tn+"\r\n")) })
		}
		c := &http.Client{Transport: rt}
		do := func() idemhttptest.Response {
			t.Helper()
			return idemhttptest.Send(t, c, "POST", target, key, body, "X-Tenant", tn)
		}
		r := do()
		switch trigger {
		case "ClientTimeout", "ResetAfterRun":
			// While the first answer is not stored yet, the documented
			// answer is 409 request-in-progress (a 4xx: the client
			// stops); its next call gets the replay.
			deadline := time.Now().Add(hangGuard)
			for r.Status == http.StatusConflict && time.Now().Before(deadline) {
				wantRuleOf(t, r, http.StatusConflict, "request-in-progress")
				time.Sleep(5 * time.Millisecond)
				rt.BeforeRetry = nil
				r = do()
			}
			if r.Status != http.StatusCreated || r.Body != "receipt of "+tn+" (run 1)" || r.Header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("%s: %d %q (%s %q), want the first answer replayed: 201 %q", tn, r.Status, r.Body,
					idemhttp.ReplayedHeader, r.Header.Get(idemhttp.ReplayedHeader), "receipt of "+tn+" (run 1)")
			}
			if h := r.Header.Get(idemhttp.DerivedKeyHeader); (h == "true") != derived {
				t.Fatalf("%s: %s %q with derived=%v", tn, idemhttp.DerivedKeyHeader, h, derived)
			}
		case "UpstreamBroke", "UpstreamTimeout":
			// The first answer (502, 504) was retried as a 5xx, and so was
			// every refusal after it: the last is the key's refusal.
			if rt.Sent() != 4 {
				t.Fatalf("%s: %d attempts, want 4 (each answer a 5xx)", tn, rt.Sent())
			}
			wantRuleOf(t, r, http.StatusInternalServerError, "response-not-replayable")
		}
		if strings.Contains(r.Body, "receipt of") && !strings.Contains(r.Body, "receipt of "+tn) {
			t.Fatalf("%s got another tenant's receipt: %q", tn, r.Body)
		}
	}
	if proxy != nil && proxy.Dropped() != 2 {
		t.Fatalf("the proxy dropped %d answers, want one per tenant", proxy.Dropped())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.runs) != 2 || b.runs["acme"] != 1 || b.runs["globex"] != 1 {
		t.Fatalf("the backend ran %v, want once for acme and once for globex", b.runs)
	}
}

// wantRuleOf is wantRule for a response idemhttptest.Send read.
func wantRuleOf(t *testing.T, r idemhttptest.Response, status int, rule string) {
	t.Helper()
	if r.Status != status || !strings.Contains(r.Body, "#"+rule+`"`) {
		t.Fatalf("%d %s; want %d %s", r.Status, r.Body, status, rule)
	}
}
