package idemhttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// testPanicReleases: a handler's panic reaches the server as it was (the
// middleware re-raises the same value) and the key is released: the retry
// runs again; over a real server, a handler that aborts before writing
// cuts the connection (every door: idemhttptest's PanicReleases and
// AbortedHandlerReleases).
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

	// Over a real server, a handler that aborts before writing anything:
	// the client sees the connection cut, not a half-response, and the
	// retry runs again.
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

// TestPanicReleases checks that a handler's panic is re-raised as it was
// and releases the key, on every store (onEveryStore).
func TestPanicReleases(t *testing.T) { onEveryStore(t, testPanicReleases) }
