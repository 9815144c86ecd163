package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestInvalidOptionsPanic: every option that cannot work fails New, with a
// message naming it, instead of misbehaving on every request
// (WithMaxResponse(0) released every key: 16 concurrent duplicates ran the
// handler 16 times; WithTTL(0) answered every keyed request with 503).
func TestInvalidOptionsPanic(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	for _, c := range []struct {
		name string
		opts []idemhttp.Option
	}{
		{"WithMaxResponse(0)", []idemhttp.Option{idemhttp.WithMaxResponse(0)}},
		{"WithMaxResponse(-1)", []idemhttp.Option{idemhttp.WithMaxResponse(-1)}},
		{"WithMaxResponse(33554433)", []idemhttp.Option{idemhttp.WithMaxResponse(idemhttp.MaxMaxResponse + 1)}},
		{"WithTTL(0s)", []idemhttp.Option{idemhttp.WithTTL(0)}},
		{"WithTTL(-1s)", []idemhttp.Option{idemhttp.WithTTL(-time.Second)}},
		{"WithLease(0s)", []idemhttp.Option{idemhttp.WithLease(0)}},
		{"WithLease(-1ns)", []idemhttp.Option{idemhttp.WithLease(-1)}},
		{"WithLease(2m0s) exceeds the TTL, 1m0s (WithTTL)", []idemhttp.Option{idemhttp.WithLease(2 * time.Minute), idemhttp.WithTTL(time.Minute)}},
		{"WithLease(25h0m0s) exceeds the TTL, 24h0m0s (WithTTL)", []idemhttp.Option{idemhttp.WithLease(25 * time.Hour)}},
		{"WithWait(-1s)", []idemhttp.Option{idemhttp.WithWait(-time.Second)}},
		{"WithMaxRetryAfter(0s)", []idemhttp.Option{idemhttp.WithMaxRetryAfter(0)}},
		{"WithMaxBody(0)", []idemhttp.Option{idemhttp.WithMaxBody(0)}},
		{"WithMethods()", []idemhttp.Option{idemhttp.WithMethods()}},
		{`WithMethods("PO ST")`, []idemhttp.Option{idemhttp.WithMethods("POST", "PO ST")}},
		{`WithMethods("")`, []idemhttp.Option{idemhttp.WithMethods("")}},
		{`WithStoredHeaders("X Bad")`, []idemhttp.Option{idemhttp.WithStoredHeaders("Content-Type", "X Bad")}},
		{"WithTenant(nil)", []idemhttp.Option{idemhttp.WithTenant(nil)}},
		{"WithOperation(nil)", []idemhttp.Option{idemhttp.WithOperation(nil)}},
		{"WithFingerprint(nil)", []idemhttp.Option{idemhttp.WithFingerprint(nil)}},
		{"WithPolicy(nil)", []idemhttp.Option{idemhttp.WithPolicy(nil)}},
		{"WithObserver(nil)", []idemhttp.Option{idemhttp.WithObserver(nil)}},
		{`WithProblemBase("")`, []idemhttp.Option{idemhttp.WithProblemBase("")}},
		{`WithProblemBase("/docs#")`, []idemhttp.Option{idemhttp.WithProblemBase("/docs#")}},
		{"nil Option", []idemhttp.Option{nil}},
		{"New: no tenancy chosen: pass WithTenant(f)", nil},
		{"New: no tenancy chosen", []idemhttp.Option{idemhttp.WithTTL(time.Minute)}},
		{"WithTenant and SingleTenant both given", []idemhttp.Option{idemhttp.SingleTenant(),
			idemhttp.WithTenant(func(*http.Request) string { return "t" })}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				p := recover()
				msg, _ := p.(string)
				if !strings.HasPrefix(msg, "idemhttp: ") || !strings.Contains(msg, c.name) {
					t.Fatalf("New panicked with %v, want a message naming %s", p, c.name)
				}
			}()
			idemhttp.New(ex, c.opts...)
		})
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "executor is nil") {
				t.Fatalf("New(nil) panicked with %v", p)
			}
		}()
		idemhttp.New(nil)
	}()
	// Valid edge values are accepted.
	idemhttp.New(ex, idemhttp.SingleTenant(), idemhttp.WithMaxResponse(1), idemhttp.WithMaxResponse(idemhttp.MaxMaxResponse),
		idemhttp.WithTTL(time.Minute), idemhttp.WithLease(time.Minute), idemhttp.WithWait(0),
		idemhttp.WithMaxBody(1), idemhttp.WithStoredHeaders(), idemhttp.WithMethods("PUT", "POST"),
		idemhttp.WithProblemBase("urn:example:idem:"))
}

// TestStoreFull: a store at its capacity (idem.ErrStoreFull) and a store
// whose connections are all in use (idem.ErrStoreBusy, which matches
// ErrStoreFull too) are each a 503 with Retry-After and a rule of their
// own (store-full, store-busy), not a store outage.
func TestStoreFull(t *testing.T) {
	for _, c := range []struct {
		err        error
		rule, wait string
		kind       idemhttp.EventKind
		other      idemhttp.EventKind
	}{
		{idem.ErrStoreFull, "store-full", "2", idemhttp.EventStoreFull, idemhttp.EventStoreBusy},
		{idem.ErrStoreBusy, "store-busy", "1", idemhttp.EventStoreBusy, idemhttp.EventStoreFull},
	} {
		t.Run(c.rule, func(t *testing.T) {
			fs := &faultyStore{Store: memstore.New(), claimErr: fmt.Errorf("somestore: claim 00ff: %w", c.err)}
			e := newEnv(t, newStoreOf(fs), statusHandler(201))
			w := e.do("POST", "/orders", "k1", "{}")
			wantProblem(t, w, 503, c.rule)
			if got := w.Header().Get("Retry-After"); got != c.wait {
				t.Errorf("Retry-After %q, want %s", got, c.wait)
			}
			e.wantRuns(0)
			if evs := e.events(c.kind); len(evs) != 1 || !errors.Is(evs[0].Err, c.err) {
				t.Fatalf("%s events %+v", c.kind, evs)
			}
			if evs := e.events(c.other); len(evs) != 0 {
				t.Fatalf("%s events %+v", c.other, evs)
			}
		})
	}
}

// TestTenantOverQuota: a tenant that holds its share of a memstore is
// answered 429 with its own rule and event, while the store is not full:
// another tenant's new key runs, and the refused tenant's own keys replay.
// The share counts the middleware's tenant whichever tenancy the executor
// has: its own tenant function (here the same account), or SingleTenant,
// as the README shows (the middleware's tenant is then the key's tenant:
// idem.KeyParts.Tenant).
func TestTenantOverQuota(t *testing.T) {
	type accountKey struct{}
	for _, c := range []struct {
		name    string
		tenancy idem.Option
	}{
		{"executor WithTenant", idem.WithTenant(func(ctx context.Context) string { s, _ := ctx.Value(accountKey{}).(string); return s })},
		{"executor SingleTenant", idem.SingleTenant()},
	} {
		t.Run(c.name, func(t *testing.T) {
			var evs []idemhttp.Event
			var runs int
			ex := idem.NewExecutor(memstore.New(memstore.WithTenantShare(1)), c.tenancy)
			mw := idemhttp.New(ex, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }),
				idemhttp.WithObserver(func(ev idemhttp.Event) { evs = append(evs, ev) }))
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.WriteHeader(201)
			}))
			do := func(account, key string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
				r.Header.Set(idemhttp.Header, key)
				r.Header.Set("X-Account", account)
				r = r.WithContext(context.WithValue(r.Context(), accountKey{}, account))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			wantStatus(t, do("a", "k1"), 201)
			w := do("a", "k2")
			p := wantProblem(t, w, 429, "tenant-over-quota")
			if !strings.Contains(p.Detail, "share") {
				t.Errorf("detail %q does not name the tenant's share", p.Detail)
			}
			if got := w.Header().Get("Retry-After"); got != "2" {
				t.Errorf("Retry-After %q, want 2", got)
			}
			var q *idem.TenantQuotaError
			if len(evs) != 1 || evs[0].Kind != idemhttp.EventTenantOverQuota || !errors.As(evs[0].Err, &q) || evs[0].Tenant != "a" || evs[0].Status != 429 {
				t.Fatalf("events %+v, want one tenant_over_quota", evs)
			}
			wantStatus(t, do("b", "k2"), 201)
			w = do("a", "k1")
			wantStatus(t, w, 201)
			if w.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("the refused tenant's own key is not replayed: %v", w.Header())
			}
			if runs != 2 {
				t.Errorf("%d runs, want 2", runs)
			}
		})
	}
}

// TestStoreTooLarge: a store (or the executor) refusing the request's scope
// as too large is a 400, not a 503 to retry forever.
func TestStoreTooLarge(t *testing.T) {
	fs := &faultyStore{Store: memstore.New(), claimErr: fmt.Errorf("memstore: claim 00ff: tenant of 2000 bytes: %w", idem.ErrTooLarge)}
	e := newEnv(t, newStoreOf(fs), statusHandler(201))
	for range 2 {
		wantProblem(t, e.do("POST", "/orders", "k1", "{}"), 400, "scope-too-long")
	}
	e.wantRuns(0)

	// An operation of the service's own naming that is too long: 400, not
	// 414 (the path is not at fault).
	e2 := newEnv(t, newStoreOf(memstore.New()), statusHandler(201),
		idemhttp.WithOperation(func(r *http.Request) string { return strings.Repeat("op", idem.MaxOpLen) }))
	p := wantProblem(t, e2.do("POST", "/orders", "k1", "{}"), 400, "scope-too-long")
	if !strings.Contains(p.Detail, "operation") {
		t.Errorf("detail %q does not name the operation", p.Detail)
	}
	e2.wantRuns(0)
}

// TestUnencodableFingerprint: a custom fingerprint that adds a value the
// hasher cannot encode is the request's problem (400), found before the
// claim, not a store failure (503) on every retry.
func TestUnencodableFingerprint(t *testing.T) {
	fp := func(r *http.Request, body []byte, h *idem.Hasher) error {
		if r.URL.Query().Has("chan") {
			h.Value(make(chan int))
		} else {
			h.Value(map[string]any{"path": r.URL.Path})
		}
		return nil
	}
	e := newEnv(t, newStoreOf(memstore.New()), statusHandler(201), idemhttp.WithFingerprint(fp))
	for range 2 {
		wantProblem(t, e.do("POST", "/orders?chan", "k1", "{}"), 400, "invalid-request")
	}
	e.wantRuns(0)
	if n := len(e.events(idemhttp.EventInvalidRequest)); n != 2 {
		t.Fatalf("%d invalid-request events", n)
	}
	wantStatus(t, e.do("POST", "/orders", "k2", "{}"), 201)
	wantReplayed(t, e.do("POST", "/orders", "k2", "{}").Header(), true)
}

// TestResponseNotReplayable: when the first request ran but its response
// could not be stored, or no longer decodes, a retry is told so (500, its
// own rule) and the handler does not run again; never a 503 to retry
// forever.
func TestResponseNotReplayable(t *testing.T) {
	for _, c := range []struct {
		name    string
		outcome func(idem.Outcome) (idem.Outcome, error)
		detail  string
	}{
		{"refused by the store", func(o idem.Outcome) (idem.Outcome, error) {
			if len(o.Body) > 0 {
				return o, fmt.Errorf("memstore: complete 00ff: %w", idem.ErrTooLarge)
			}
			return o, nil // the executor's substitute: no body
		}, "could not be stored"},
		{"undecodable", func(o idem.Outcome) (idem.Outcome, error) {
			o.Body = []byte(`"a response of another release"`)
			return o, nil
		}, "no longer decodes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &faultyStore{Store: memstore.New(), outcome: c.outcome}
			e := newEnv(t, newStoreOf(fs), statusHandler(201))
			first := e.do("POST", "/orders", "k1", "{}")
			wantStatus(t, first, 201)
			if first.Body.String() != "run 1" {
				t.Fatalf("first response %q", first.Body)
			}
			for range 2 {
				p := wantProblem(t, e.do("POST", "/orders", "k1", "{}"), 500, "response-not-replayable")
				if !strings.Contains(p.Detail, c.detail) {
					t.Errorf("detail %q, want it to say %q", p.Detail, c.detail)
				}
			}
			e.wantRuns(1)
			if n := len(e.events(idemhttp.EventNotReplayable)); n != 2 {
				t.Fatalf("%d not-replayable events", n)
			}
		})
	}
}

// TestClientGoneWhileWaiting: a client that goes away while its request
// waits for the key (WithClientCancellation, WithWait) is its own doing: no
// store error is reported, and nothing runs.
func TestClientGoneWhileWaiting(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, newStoreOf(memstore.New()), blockingHandler(started, release),
		idemhttp.WithClientCancellation(), idemhttp.WithWait(time.Minute))
	done := make(chan struct{})
	go func() { e.do("POST", "/orders", "k", "{}"); close(done) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // gone before its request waits
	r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}")).WithContext(ctx)
	r.Header.Set(idemhttp.Header, "k")
	e.h.ServeHTTP(httptest.NewRecorder(), r)
	close(release)
	<-done
	e.wantRuns(1)
	if evs := e.events(idemhttp.EventStoreError); len(evs) != 0 {
		t.Fatalf("store-error events for a client that left: %+v", evs)
	}
	if evs := e.events(idemhttp.EventClientGone); len(evs) != 1 || !errors.Is(evs[0].Err, context.Canceled) {
		t.Fatalf("client-gone events %+v", evs)
	}
}

// TestTransportQuotesUnsafeKeys: a key that would be misread bare (a comma
// makes a list) is sent as a structured-field string, and the middleware
// reads it back intact.
func TestTransportQuotesUnsafeKeys(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	e := newEnv(t, newStoreOf(memstore.New()), statusHandler(201))
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get(idemhttp.Header))
		mu.Unlock()
		e.h.ServeHTTP(w, r)
	}))
	client := &http.Client{Transport: &idemhttp.Transport{Base: srv.Client().Transport}}
	for _, key := range []string{"a,b", `"q"`, " padded ", "plain"} {
		ctx := idemhttp.ContextWithOutgoingKey(context.Background(), key)
		for i := range 2 {
			st, h, _, err := postVia(ctx, client, srv.URL+"/orders", "{}")
			if err != nil || st != 201 || (h.Get(idemhttp.ReplayedHeader) == "true") != (i == 1) {
				t.Fatalf("key %q attempt %d: %d %v %v", key, i, st, h, err)
			}
		}
		if evs := e.events(idemhttp.EventReplayed); evs[len(evs)-1].Key != key {
			t.Fatalf("the middleware read key %q as %q", key, evs[len(evs)-1].Key)
		}
	}
	e.wantRuns(4)
	mu.Lock()
	defer mu.Unlock()
	want := []string{`"a,b"`, `"a,b"`, `"\"q\""`, `"\"q\""`, `" padded "`, `" padded "`, "plain", "plain"}
	if strings.Join(sent, "|") != strings.Join(want, "|") {
		t.Fatalf("keys sent %q, want %q", sent, want)
	}
}

// TestContentEncodingAlwaysStored: an allow-list without Content-Encoding
// still stores it: a replayed compressed body is unreadable without it.
func TestContentEncodingAlwaysStored(t *testing.T) {
	e := newEnv(t, newStoreOf(memstore.New()), negotiatingHandler, idemhttp.WithStoredHeaders("Content-Type"))
	e.do("POST", "/orders", "k", "{}", "Accept-Encoding", "gzip")
	w := e.do("POST", "/orders", "k", "{}", "Accept-Encoding", "gzip")
	wantReplayed(t, w.Header(), true)
	if ce := w.Header().Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("replayed Content-Encoding %q, want gzip", ce)
	}
	if v := w.Header().Get("Vary"); v != "" {
		t.Fatalf("Vary %q replayed though not allow-listed", v)
	}
	// Vary was not replayed, but it was honoured.
	wantProblem(t, e.do("POST", "/orders", "k", "{}"), 406, "replay-not-acceptable")
}

// TestVaryCredentialNotStored: a response that varies on Authorization
// keeps a digest of the first request's credential, never the credential.
func TestVaryCredentialNotStored(t *testing.T) {
	var mu sync.Mutex
	var stored []byte
	fs := &faultyStore{Store: memstore.New(), outcome: func(o idem.Outcome) (idem.Outcome, error) {
		mu.Lock()
		stored = append(stored, o.Body...)
		mu.Unlock()
		return o, nil
	}}
	e := newEnv(t, newStoreOf(fs), negotiatingHandler)
	e.do("POST", "/me", "k", "{}", "Authorization", "Bearer secret-token")
	wantReplayed(t, e.do("POST", "/me", "k", "{}", "Authorization", "Bearer secret-token").Header(), true)
	mu.Lock()
	defer mu.Unlock()
	if len(stored) == 0 || strings.Contains(string(stored), "secret-token") || !strings.Contains(string(stored), "sha256:") {
		t.Fatalf("stored outcome %s: want a digest of the credential, not the credential", stored)
	}
}
