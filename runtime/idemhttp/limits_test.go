package idemhttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

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

// TestResponseTooLarge checks WithMaxResponse, its event and a response at the limit on every store (onEveryStore).
func TestResponseTooLarge(t *testing.T) { onEveryStore(t, testResponseTooLarge) }

// TestRequestBody checks WithMaxBody, chunked bodies and idem.KeyFrom in the handler on every store (onEveryStore).
func TestRequestBody(t *testing.T) { onEveryStore(t, testRequestBody) }
