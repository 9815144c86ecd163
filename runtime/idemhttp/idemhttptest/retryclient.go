package idemhttptest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// This file is the table "a client that retries on its own in front of the
// door": an http.Client whose RoundTripper (RetryingTransport) resends a
// request after a transport error or a 5xx, the same request with the same
// Idempotency-Key (KeyGiven) or with none, the door deriving the key
// (KeyDerived: idemhttp.WithDerivedKey), by two tenants sending identical
// requests (the same key, the same body). The triggers:
//
//   - TimeoutThenReplay: the client's attempt ends (its timeout) while the
//     handler runs; the handler answers, the door stores it, the client
//     resends: the first call's answer, replayed.
//   - TimeoutRetryInFlight: the client resends while the handler still
//     runs: 409 request-in-progress with Retry-After (a 4xx: the client
//     stops), and its next call, once the answer is stored, the replay.
//   - ResetAfterRun: the handler ran and answered, and the connection broke
//     before the answer reached the client (a proxy drops it): the client
//     resends, and gets the answer, replayed.
//
// In every cell each tenant's handler runs once, every replay is the first
// answer of that tenant (status, body, Idempotent-Replayed: true, and
// Idempotency-Key-Derived: true for a derived key), and no tenant ever
// gets the other's receipt.

// retryTriggers are the table's rows.
var retryTriggers = []string{"TimeoutThenReplay", "TimeoutRetryInFlight", "ResetAfterRun"}

func (s *suite) testRetryingClient(t *testing.T) {
	for _, trigger := range retryTriggers {
		for _, derived := range []bool{false, true} {
			name := trigger + "/KeyGiven"
			if derived {
				name = trigger + "/KeyDerived"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				s.retryCell(t, trigger, derived)
			})
		}
	}
}

// retryCell runs one cell of the table (see the file's comment).
func (s *suite) retryCell(t *testing.T, trigger string, derived bool) {
	tenants := []string{"acme", "globex"}
	stored := make(chan struct{}, 16)
	ex := idem.NewExecutor(s.o.NewStore(t), idem.SingleTenant(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventCompleted {
			select {
			case stored <- struct{}{}:
			default:
			}
		}
	}))
	block := trigger != "ResetAfterRun"
	started, release := map[string]chan struct{}{}, map[string]chan struct{}{}
	for _, tn := range tenants {
		started[tn], release[tn] = make(chan struct{}, 1), make(chan struct{})
	}
	var mu sync.Mutex
	runs := map[string]int{}
	url := s.o.Mount(t, Config{
		Executor: ex,
		Options:  []idemhttp.Option{idemhttp.WithTenant(tenantHeader), idemhttp.WithDerivedKey(idemhttp.MaxDerivedKeyWindow)},
		Paths:    Paths,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant := strings.Clone(r.Header.Get("X-Tenant")) // a copy: Fiber reuses its buffers
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			runs[tenant]++
			n := runs[tenant]
			mu.Unlock()
			if ch, ok := release[tenant]; ok && block {
				started[tenant] <- struct{}{}
				<-ch
			}
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, "receipt of %s (run %d)", tenant, n)
		}),
	})
	unblock := map[string]func(){}
	for _, tn := range tenants { // after Mount: their cleanups run before the server's Close
		unblock[tn] = closer(t, release[tn])
	}
	target := url
	var proxy *lossyproxy.Proxy
	if trigger == "ResetAfterRun" {
		proxy = lossyproxy.New(t, strings.TrimPrefix(url, "http://"))
		target = "http://" + proxy.Addr()
	}
	waitStored := func(tn string) {
		t.Helper()
		select {
		case <-stored:
		case <-time.After(hangGuard):
			t.Fatalf("%s: the first answer was not stored within %v", tn, hangGuard)
		}
	}
	key := ""
	if !derived {
		key = idemhttp.GenerateKey() // one key for both tenants: the door scopes it
	}
	body := `{"order":"` + idemhttp.GenerateKey() + `"}` // fresh: derived keys outlive the test on a shared store

	for _, tn := range tenants {
		rt := &RetryingTransport{Attempts: 4}
		rt.AttemptContext = func(ctx context.Context, n int) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, hangGuard)
			if n == 1 && block { // the client's timeout, shorter than the handler
				go func() {
					select {
					case <-started[tn]:
						cancel()
					case <-ctx.Done():
					}
				}()
			}
			return ctx, cancel
		}
		rt.BeforeRetry = func(n, status int, err error) {
			if n != 2 {
				t.Errorf("%s: attempt %d after %d %v: the door's answer to the retry was retried", tn, n, status, err)
				return
			}
			if err == nil {
				t.Errorf("%s: the first attempt got %d, want it cut (%s)", tn, status, trigger)
			}
			switch trigger {
			case "TimeoutThenReplay":
				unblock[tn]()
				waitStored(tn)
			case "ResetAfterRun":
				waitStored(tn)
			}
		}
		if proxy != nil {
			proxy.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, []byte("\r\nX-Tenant: "+tn+"\r\n")) })
		}
		c := &http.Client{Transport: rt}
		do := func() resp {
			t.Helper()
			r := Send(t, c, "POST", target+"/orders", key, body, "X-Tenant", tn)
			return resp{status: r.Status, header: r.Header, body: []byte(r.Body)}
		}
		wantReplay := func(r resp) {
			t.Helper()
			want(t, r, http.StatusCreated, "receipt of "+tn+" (run 1)", true)
			if got := r.header.Get(idemhttp.DerivedKeyHeader); (got == "true") != derived {
				t.Fatalf("%s: %s %q with derived=%v", tn, idemhttp.DerivedKeyHeader, got, derived)
			}
		}
		r := do()
		if trigger == "TimeoutRetryInFlight" {
			wantProblem(t, r, http.StatusConflict, "request-in-progress")
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("%s: 409 without Retry-After", tn)
			}
			unblock[tn]()
			waitStored(tn)
			rt.BeforeRetry = nil
			r = do()
		}
		wantReplay(r)
		if proxy != nil && proxy.Dropped() == 0 {
			t.Fatalf("%s: the proxy dropped no answer", tn)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2 || runs["acme"] != 1 || runs["globex"] != 1 {
		t.Fatalf("the handler ran %v, want once for acme and once for globex", runs)
	}
}
