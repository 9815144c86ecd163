package idemhttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// faultyStore is a memstore whose calls fail on demand.
type faultyStore struct {
	*memstore.Store
	claimErr, completeErr error
	// outcome, when set, decides what Complete stores, or refuses it.
	outcome func(idem.Outcome) (idem.Outcome, error)
}

func (s *faultyStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if s.claimErr != nil {
		return idem.Claim{}, s.claimErr
	}
	return s.Store.Claim(ctx, req)
}

func (s *faultyStore) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	if s.outcome != nil {
		var err error
		if out, err = s.outcome(out); err != nil {
			return err
		}
	}
	return s.Store.Complete(ctx, key, token, out, ttl)
}

// failingTxStore is a TxStore whose commit fails: nothing the handler did
// happened.
type failingTxStore struct{ *memstore.Store }

func (s failingTxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, _ time.Duration) (idem.Claim, idem.Txn, error) {
	c, err := s.Claim(ctx, req)
	if err != nil || !c.Claimed {
		return c, nil, err
	}
	return c, failingTxn{}, nil
}

type failingTxn struct{}

func (failingTxn) Context(ctx context.Context) context.Context { return ctx }
func (failingTxn) Complete(context.Context, idem.Outcome, time.Duration, bool) error {
	return errors.New("commit: connection reset")
}
func (failingTxn) Release(context.Context) error { return nil }

func newStoreOf(s idem.Store) newStoreFunc { return func(*testing.T) idem.Store { return s } }

// TestStoreUnavailable: a store that cannot be used before the handler ran
// (down, or its schema never migrated) is a 503 store-unavailable, and the
// event's error wraps idem.ErrStoreUnavailable.
func TestStoreUnavailable(t *testing.T) {
	for name, claimErr := range map[string]error{
		"down":   errors.New("dial tcp: connection refused"),
		"schema": fmt.Errorf("pgstore: claim 00ff: %w: run Migrate: relation does not exist", idem.ErrStoreSchema),
	} {
		t.Run(name, func(t *testing.T) {
			fs := &faultyStore{Store: memstore.New(), claimErr: claimErr}
			e := newEnv(t, newStoreOf(fs), statusHandler(201))
			w := e.do("POST", "/orders", "k1", "{}")
			wantProblem(t, w, 503, "store-unavailable")
			if w.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After on 503")
			}
			e.wantRuns(0)
			evs := e.events(idemhttp.EventStoreError)
			if len(evs) != 1 || !errors.Is(evs[0].Err, idem.ErrStoreUnavailable) {
				t.Fatalf("events %v: want one store error wrapping idem.ErrStoreUnavailable", evs)
			}
		})
	}
}

func TestLeaseLostStillAnswers(t *testing.T) {
	fs := &faultyStore{Store: memstore.New(), completeErr: idem.ErrLeaseLost}
	e := newEnv(t, newStoreOf(fs), statusHandler(201))
	w := e.do("POST", "/orders", "k1", "{}")
	wantStatus(t, w, 201)
	if w.Body.String() != "run 1" {
		t.Fatalf("body %q", w.Body)
	}
	if len(e.events(idemhttp.EventStoreError)) != 1 {
		t.Fatal("no store-error event")
	}
}

func TestCompleteFailureStillAnswers(t *testing.T) {
	// Lease mode: the handler's effects happened; its response goes out
	// even though it could not be stored.
	fs := &faultyStore{Store: memstore.New(), completeErr: errors.New("timeout")}
	e := newEnv(t, newStoreOf(fs), statusHandler(201))
	wantStatus(t, e.do("POST", "/orders", "k1", "{}"), 201)
}

func TestTxCommitFailure(t *testing.T) {
	e := newEnv(t, newStoreOf(failingTxStore{memstore.New()}), richHandler)
	w := e.do("POST", "/orders", "k1", "{}")
	wantProblem(t, w, 503, "store-unavailable")
	if w.Header().Get("Location") != "" || w.Header().Get("Set-Cookie") != "" {
		t.Fatalf("the rolled-back response leaked headers: %v", w.Header())
	}

	// Streaming: the client must not see a complete response.
	e2 := newEnv(t, newStoreOf(failingTxStore{memstore.New()}), func(e *env, w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
	})
	defer func() {
		if p, _ := recover().(error); !errors.Is(p, http.ErrAbortHandler) {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	e2.do("POST", "/orders", "k2", "{}")
}

func TestMaxRetryAfter(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, newStoreOf(memstore.New()), blockingHandler(started, release),
		idemhttp.WithLease(time.Minute), idemhttp.WithMaxRetryAfter(1500*time.Millisecond))
	done := make(chan struct{})
	go func() { e.do("POST", "/orders", "k", "{}"); close(done) }()
	<-started
	w := e.do("POST", "/orders", "k", "{}")
	wantStatus(t, w, 409)
	if got := w.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2 (1.5s rounded up)", got)
	}
	close(release)
	<-done
}

func TestImplicitOKAndSniffing(t *testing.T) {
	e := newEnv(t, newStoreOf(memstore.New()), func(e *env, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/html" {
			_, _ = io.WriteString(w, "<html><body>hi</body></html>")
		}
	})
	for _, path := range []string{"/empty", "/html"} {
		first := e.do("POST", path, "k"+path, "{}")
		second := e.do("POST", path, "k"+path, "{}")
		wantStatus(t, first, 200)
		wantStatus(t, second, 200)
		wantReplayed(t, second.Header(), true)
		if first.Body.String() != second.Body.String() ||
			first.Header().Get("Content-Type") != second.Header().Get("Content-Type") ||
			first.Header().Get("Content-Length") != second.Header().Get("Content-Length") {
			t.Errorf("%s: first %v %q, replay %v %q", path, first.Header(), first.Body, second.Header(), second.Body)
		}
	}
	e.wantRuns(2)
}

func TestInformationalAndTrailers(t *testing.T) {
	e := newEnv(t, newStoreOf(memstore.New()), func(e *env, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	srv := loopback(t, e.h)
	req, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || string(b) != "body" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("first: %d %q trailer %v", resp.StatusCode, b, resp.Trailer)
	}
	st, h, body, err := post(t, srv.Client(), srv.URL+"/x", "k", "{}")
	if err != nil || st != 201 || body != "body" || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %q %v", st, body, err)
	}
}

func TestHijackReleases(t *testing.T) {
	e := newEnv(t, newStoreOf(memstore.New()), func(e *env, w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		rw.Flush()
	})
	srv := loopback(t, e.h)
	for attempt := 1; attempt <= 2; attempt++ {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 2\r\n\r\n{}")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("hijacked response: %v %v", resp, err)
		}
		conn.Close()
		// The handler returns (and the key is released) after the client
		// read its response: the next attempt waits for that.
		e.waitEvents(idemhttp.EventHijacked, attempt)
	}
	e.wantRuns(2)
	if n := len(e.events(idemhttp.EventHijacked)); n != 2 {
		t.Fatalf("%d hijack events", n)
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[idemhttp.EventKind]string{
		idemhttp.EventKeyMissing:         "key_missing",
		idemhttp.EventResponseTooLarge:   "response_too_large",
		idemhttp.EventClientGone:         "client_gone",
		idemhttp.EventTenantMissing:      "tenant_missing",
		idemhttp.EventBodyUnreadable:     "body_unreadable",
		idemhttp.EventTenantOverQuota:    "tenant_over_quota",
		idemhttp.EventStoreBusy:          "store_busy",
		idemhttp.EventOutcomeUnknown:     "outcome_unknown",
		idemhttp.EventOutcomeUnknown + 1: "event(" + strconv.Itoa(int(idemhttp.EventOutcomeUnknown)+1) + ")",
		0:                                "event(0)",
	} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

var _ = httptest.NewRecorder

// TestBodyLengthMismatch: a request Body set by hand may be longer or
// shorter than its ContentLength (a server's never is); the middleware
// hands the handler what the body holds, within the limit, and refuses a
// body that outgrows the limit, whatever ContentLength says.
func TestBodyLengthMismatch(t *testing.T) {
	const limit = 10
	e := newEnv(t, newStoreOf(memstore.New()), func(e *env, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(201)
		_, _ = w.Write(b)
	}, idemhttp.WithMaxBody(limit))
	for _, c := range []struct {
		body     string
		declared int64
		status   int
	}{
		{"abc", 3, 201},
		{"abcdef", 3, 201},       // longer than declared: read on
		{"0123456789", 4, 201},   // up to the limit
		{"0123456789x", 4, 413},  // beyond it
		{"0123456789x", 11, 413}, // declared beyond it
		{"0123456789x", -1, 413}, // unknown length
		{"abc", -1, 201},         // unknown length
		{"ab", 3, 201},           // shorter than declared
		{"", 3, 201},             // empty, 3 declared
		{"0123456789", 10, 201},  // exactly the limit
		{"0123456789", 9, 201},   // one more than declared, at the limit
		{"0123456789x", 10, 413}, // one more than declared, beyond it
	} {
		r := httptest.NewRequest("POST", "/echo", strings.NewReader(c.body))
		r.ContentLength = c.declared
		r.Header.Set(idemhttp.Header, idemhttp.GenerateKey())
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != c.status || (c.status == 201 && w.Body.String() != c.body) {
			t.Errorf("body %q declared %d: %d %q, want %d", c.body, c.declared, w.Code, w.Body, c.status)
		}
	}
}

// errBody is a request body whose read fails, as a client's does when it
// goes away mid-body or sends a malformed chunked body.
type errBody struct{}

func (errBody) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }
func (errBody) Close() error             { return nil }

// TestUnreadableBody: a body that cannot be read is answered with 400
// unreadable-body and reported to the observer, and nothing is claimed.
func TestUnreadableBody(t *testing.T) {
	e := newEnv(t, newStoreOf(memstore.New()), statusHandler(201))
	for _, cl := range []int64{-1, 10} {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Body, r.ContentLength = errBody{}, cl
		r.Header.Set(idemhttp.Header, idemhttp.GenerateKey())
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		wantProblem(t, w, 400, "unreadable-body")
	}
	e.wantRuns(0)
	if ev := e.events(idemhttp.EventBodyUnreadable); len(ev) != 2 || ev[0].Status != 400 || ev[0].Err == nil {
		t.Fatalf("body_unreadable events %+v", ev)
	}
	if n := len(e.idemEvents(idem.EventClaimed)); n != 0 {
		t.Fatalf("%d claims, want none", n)
	}
}
