package idemhttp_test

import (
	"context"
	"errors"
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

// TestInFlight409RetryAfter checks a duplicate in flight (409, Retry-After, 422 for another body) on every store (onEveryStore).
func TestInFlight409RetryAfter(t *testing.T) { onEveryStore(t, testInFlight) }

// TestInFlightWait checks WithWait on every store (onEveryStore).
func TestInFlightWait(t *testing.T) { onEveryStore(t, testInFlightWait) }

// TestConcurrent64 sends 64 duplicates at once on every store (onEveryStore).
func TestConcurrent64(t *testing.T) { onEveryStore(t, testConcurrent) }

// TestConcurrent64Wait sends 64 duplicates at once under WithWait on every store (onEveryStore).
func TestConcurrent64Wait(t *testing.T) { onEveryStore(t, testConcurrentWait) }

// TestClientTimeoutThenRetry checks a client that times out while its handler runs on every store (onEveryStore).
func TestClientTimeoutThenRetry(t *testing.T) { onEveryStore(t, testClientTimeoutThenRetry) }

// TestClientCancellationOption checks WithClientCancellation on every store (onEveryStore).
func TestClientCancellationOption(t *testing.T) { onEveryStore(t, testClientCancellationOption) }
