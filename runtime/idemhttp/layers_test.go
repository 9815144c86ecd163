package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var (
	errOrderNotFound    = errors.New("order not found")         // not final: released by the wrapper
	errAlreadyCancelled = errors.New("order already cancelled") // final=
)

// cancelOrder is what idemgen generates for
//
//	//idem:key=id ttl=1m final=errAlreadyCancelled
//	func CancelOrder(ctx context.Context, id string) (string, error)
func cancelOrder(ctx context.Context, ex *idem.Executor, id string, fn func(context.Context) (string, error)) (string, error) {
	m := idem.Method{Op: "Orders.Cancel", TTL: time.Minute,
		Final: []idem.FinalError{{Name: "errAlreadyCancelled", Err: errAlreadyCancelled}}}
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(id)
	return idem.Do(ctx, ex, &m, &k, &h, fn)
}

// TestEdgeFollowsWrapper: one rule for what a retry sees. When the handler
// calls a wrapped method, the middleware follows its decision whatever
// status the handler mapped it to (a transient error is not stored, even
// as 404; a final error is stored, even as 409), except a 5xx that the
// policy releases; when it calls none, the status policy decides.
func TestEdgeFollowsWrapper(t *testing.T) {
	type result struct {
		err    error
		status int
	}
	cases := []struct {
		name       string
		wrapped    bool // the handler calls the wrapper
		first      result
		policy     idemhttp.Policy
		wantRuns   int64 // of the handler, over two requests with one key
		wantReplay bool
	}{
		{name: "wrapper success, 200", wrapped: true, first: result{nil, 200}, wantRuns: 1, wantReplay: true},
		{name: "wrapper transient mapped to 404: not stored", wrapped: true, first: result{errOrderNotFound, 404}, wantRuns: 2},
		{name: "wrapper transient mapped to 200: not stored", wrapped: true, first: result{errOrderNotFound, 200}, wantRuns: 2},
		{name: "wrapper final mapped to 409: stored", wrapped: true, first: result{errAlreadyCancelled, 409}, wantRuns: 1, wantReplay: true},
		{name: "wrapper final mapped to 429: stored", wrapped: true, first: result{errAlreadyCancelled, 429}, wantRuns: 1, wantReplay: true},
		{name: "wrapper final mapped to 500: the policy releases a 5xx", wrapped: true, first: result{errAlreadyCancelled, 500}, wantRuns: 2},
		{name: "wrapper final mapped to 500, StoreAll: stored", wrapped: true, first: result{errAlreadyCancelled, 500}, policy: idemhttp.StoreAll, wantRuns: 1, wantReplay: true},
		{name: "wrapper transient mapped to 404, StoreAll: not stored", wrapped: true, first: result{errOrderNotFound, 404}, policy: idemhttp.StoreAll, wantRuns: 2},
		{name: "no wrapper, 404: policy stores", first: result{nil, 404}, wantRuns: 1, wantReplay: true},
		{name: "no wrapper, 409: policy releases", first: result{nil, 409}, wantRuns: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
			runs := 0
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				if c.wrapped {
					_, _ = cancelOrder(r.Context(), ex, "order-1", func(context.Context) (string, error) {
						return "cancelled", c.first.err
					})
				}
				w.WriteHeader(c.first.status)
				fmt.Fprintf(w, "run %d", runs)
			})
			opts := []idemhttp.Option{idemhttp.SingleTenant()}
			if c.policy != nil {
				opts = append(opts, idemhttp.WithPolicy(c.policy))
			}
			mw := idemhttp.New(ex, opts...)(h)
			var last *httptest.ResponseRecorder
			for range 2 {
				r := httptest.NewRequest(http.MethodPost, "/orders/order-1/cancel", nil)
				r.Header.Set(idemhttp.Header, "client-key-1")
				last = httptest.NewRecorder()
				mw.ServeHTTP(last, r)
			}
			if int64(runs) != c.wantRuns {
				t.Fatalf("handler ran %d times, want %d", runs, c.wantRuns)
			}
			wantReplayed(t, last.Header(), c.wantReplay)
			if c.wantReplay && last.Code != c.first.status {
				t.Fatalf("replayed %d, want %d", last.Code, c.first.status)
			}
		})
	}
}

// TestWriteError: for every error a wrapper returns that the middleware
// has a rule for, WriteError writes the middleware's answer (status, type,
// Retry-After, problem+json); for any other error it writes nothing.
func TestWriteError(t *testing.T) {
	inProgress := &idem.InProgressError{RetryAfter: 3 * time.Second}
	cases := []struct {
		err        error
		status     int
		rule       string
		retryAfter string
	}{
		{fmt.Errorf("wrapped: %w", inProgress), 409, "business-key-in-progress", "3"},
		{fmt.Errorf("idem: %w (key x)", idem.ErrPayloadMismatch), 422, "business-key-reused", ""},
		{fmt.Errorf("pay: %w", idem.ErrMissingTenant), 403, "missing-tenant", ""},
		{fmt.Errorf("pay: %w", idem.ErrTenantConflict), 403, "tenant-conflict", ""},
		{&idem.MissingKeyError{Op: "Orders.Create", Path: "req.ID"}, 400, "missing-key-part", ""},
		{fmt.Errorf("pgstore: %w", idem.ErrStoreFull), 503, "store-full", "2"},
		{idem.ErrTooLarge, 400, "scope-too-long", ""},
		{idem.ErrOutcomeNotStored, 500, "response-not-replayable", ""},
		{idem.ErrUndecodable, 500, "response-not-replayable", ""},
		{idem.ErrMisconfigured, 500, "server-misconfigured", ""},
		{idem.ErrLeaseLost, 409, "business-key-in-progress", "1"},
	}
	for _, c := range cases {
		t.Run(c.rule+"/"+c.err.Error(), func(t *testing.T) {
			w := httptest.NewRecorder()
			if !idemhttp.WriteError(w, c.err) {
				t.Fatal("WriteError wrote nothing")
			}
			wantProblem(t, w, c.status, c.rule)
			if got := w.Header().Get("Retry-After"); got != c.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, c.retryAfter)
			}
		})
	}
	for _, err := range []error{errOrderNotFound, errors.New("dial tcp: connection refused"), idem.Final(errAlreadyCancelled)} {
		w := httptest.NewRecorder()
		if idemhttp.WriteError(w, err) || w.Body.Len() != 0 {
			t.Fatalf("%v: written, want nothing", err)
		}
	}
	w := httptest.NewRecorder()
	idemhttp.WriteError(w, inProgress, idemhttp.WithProblemBase("https://example.com/problems/"), idemhttp.WithMaxRetryAfter(time.Second))
	var p idemhttp.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != "https://example.com/problems/business-key-in-progress" || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("with options: %+v, Retry-After %q (%v)", p, w.Header().Get("Retry-After"), err)
	}
}

// TestWriteErrorNamesTheLayer: the handler's answer for a wrapper's
// refusal has the middleware's format and status for the same condition
// (a key in progress, a key reused with another body), but names the
// wrapper's business key, never the client's Idempotency-Key (a new key
// would get the same answer), and its Retry-After is the wrapper's (the
// holder's lease left), not the middleware's.
func TestWriteErrorNamesTheLayer(t *testing.T) {
	store := memstore.New()
	ex := idem.NewExecutor(store, idem.SingleTenant())
	release := make(chan struct{})
	started := make(chan struct{})
	mw := idemhttp.New(ex, idemhttp.SingleTenant())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		close(started)
		<-release
		w.WriteHeader(201)
	}))
	send := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body))
		r.Header.Set(idemhttp.Header, "k")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		return w
	}
	done := make(chan struct{})
	go func() { defer close(done); send("a") }()
	<-started
	fromMiddleware := map[string]*httptest.ResponseRecorder{"in-progress": send("a"), "mismatch": send("b")}
	close(release)
	<-done
	fromWrapper := map[string]error{
		"in-progress": &idem.InProgressError{Key: idem.Key{Op: "Orders.Pay"}, RetryAfter: 7 * time.Second},
		"mismatch":    idem.ErrPayloadMismatch,
	}
	wantRule := map[string][2]string{
		"in-progress": {"request-in-progress", "business-key-in-progress"},
		"mismatch":    {"key-reused", "business-key-reused"},
	}
	for name, mwRec := range fromMiddleware {
		w := httptest.NewRecorder()
		idemhttp.WriteError(w, fromWrapper[name])
		wantProblem(t, mwRec, mwRec.Code, wantRule[name][0])
		wantProblem(t, w, mwRec.Code, wantRule[name][1])
		var b idemhttp.Problem
		_ = json.Unmarshal(w.Body.Bytes(), &b)
		if strings.Contains(b.Title+b.Detail, "Idempotency-Key reused") || strings.Contains(b.Title, "Idempotency-Key") {
			t.Fatalf("%s: the wrapper's answer names the client's key: %+v", name, b)
		}
		if (mwRec.Header().Get("Retry-After") == "") != (w.Header().Get("Retry-After") == "") {
			t.Fatalf("%s: Retry-After middleware %q, WriteError %q", name, mwRec.Header().Get("Retry-After"), w.Header().Get("Retry-After"))
		}
	}
	w := httptest.NewRecorder()
	idemhttp.WriteError(w, fromWrapper["in-progress"])
	if got := w.Header().Get("Retry-After"); got != "7" {
		t.Fatalf("Retry-After %q, want the wrapper's lease left, 7", got)
	}
	var p idemhttp.Problem
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	if !strings.Contains(p.Detail, `"Orders.Pay"`) {
		t.Fatalf("detail does not name the operation: %q", p.Detail)
	}
}
