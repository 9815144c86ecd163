package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// hangGuard bounds a wait for something that must happen; it only turns a
// hang into a failure.
const hangGuard = time.Minute

// send sends method path with key (none when "") and hdr pairs through a
// client that opens a connection per request, and reads the answer whole.
func send(t *testing.T, method, url, key, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idemhttp.Header, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func wantRule(t *testing.T, resp *http.Response, body string, status int, rule string) {
	t.Helper()
	if resp.StatusCode != status || !strings.Contains(body, "#"+rule+`"`) {
		t.Fatalf("%d %s; want %d %s", resp.StatusCode, body, status, rule)
	}
}

// TestNothingBelowResends (class 1): a keyed POST after another (so that a
// keep-alive connection to the backend sits in the gateway's pool), which
// the backend reads and then answers by closing the connection, reached
// the backend once: the client gets 502 upstream-failed, and net/http's
// Transport did not resend it on a fresh connection.
func TestNothingBelowResends(t *testing.T) {
	for _, body := range []string{`{"amount":5}`, ""} {
		t.Run("body="+body, func(t *testing.T) {
			up := idemhttptest.NewBreakingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			g := startGateway(t, deps{}, "-store", "memory", "-upstream", up.URL, "-single-tenant", "-routes", "POST /charges")
			if resp, b := send(t, "POST", g.url("/charges"), idemhttp.GenerateKey(), body); resp.StatusCode != 201 {
				t.Fatalf("warm-up: %d %s", resp.StatusCode, b)
			}
			resp, b := send(t, "POST", g.url("/charges"), idemhttp.GenerateKey(), body)
			runs, broken := up.Runs.Load(), up.Broken.Load()
			// A body: the second request went over the pooled connection,
			// which broke: 502, never resent. No body: the gateway sends
			// such a request over a fresh connection, where it is answered.
			switch {
			case runs != 2:
				t.Fatalf("the backend ran %d times for 2 requests (a layer below resent one); got %d %s", runs, resp.StatusCode, b)
			case broken == 1:
				wantRule(t, resp, b, http.StatusBadGateway, "upstream-failed")
			case resp.StatusCode != 201:
				t.Fatalf("no connection broke, and the answer is %d %s", resp.StatusCode, b)
			}
		})
	}
}

// TestOversizeNotStored (class 2): a response over -max-response is sent
// to the first client marked Idempotent-Not-Stored: too-large, logged at
// WARN and counted (outcome_not_stored), and the key stays decided: the
// retry is refused with 500 response-not-replayable, the backend ran once.
func TestOversizeNotStored(t *testing.T) {
	for _, withLength := range []bool{true, false} {
		t.Run(fmt.Sprintf("content-length=%v", withLength), func(t *testing.T) {
			testOversize(t, withLength)
		})
	}
}

func testOversize(t *testing.T, withLength bool) {
	var runs atomic.Int64
	big := strings.Repeat("x", 2<<20)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		if withLength {
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(backend.Close)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant", "-metrics-path", "/metrics")
	key := idemhttp.GenerateKey()
	resp, body := send(t, "POST", g.url("/charges"), key, "{}")
	// A header field, or (the proxy streams a response of unknown length
	// as it comes) a trailer.
	if withLength && resp.Header.Get(idemhttp.NotStoredHeader) != "too-large" {
		t.Fatalf("a response of known length over the limit: %s %q, want the header field", idemhttp.NotStoredHeader, resp.Header.Get(idemhttp.NotStoredHeader))
	}
	marked := resp.Header.Get(idemhttp.NotStoredHeader) + resp.Trailer.Get(idemhttp.NotStoredHeader)
	if resp.StatusCode != 201 || len(body) != len(big) || marked != "too-large" {
		t.Fatalf("first: %d, %d bytes, %s %q (header %v, trailer %v)", resp.StatusCode, len(body), idemhttp.NotStoredHeader, marked, resp.Header, resp.Trailer)
	}
	for range 2 {
		resp, body = send(t, "POST", g.url("/charges"), key, "{}")
		wantRule(t, resp, body, http.StatusInternalServerError, "response-not-replayable")
	}
	if runs.Load() != 1 {
		t.Fatalf("the backend ran %d times, want 1", runs.Load())
	}
	if log := g.log.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "event=response_too_large") {
		t.Fatalf("no WARN line for the response not stored:\n%s", log)
	}
	_, metrics := send(t, "GET", g.url("/metrics"), "", "")
	if !strings.Contains(metrics, `outcome="outcome_not_stored"`) {
		t.Fatalf("no outcome_not_stored in the metrics:\n%s", metrics)
	}
}

// TestTimeBounds (class 3): a backend that never answers is cut at
// -upstream-timeout with 504 upstream-timeout and its key kept decided
// (the retry is refused: it may have acted); a backend that cannot be
// reached is 502 upstream-unreachable with the key released; a client
// whose body stalls is cut at -read-timeout before anything is claimed or
// sent to the backend.
func TestTimeBounds(t *testing.T) {
	t.Run("hung upstream", func(t *testing.T) {
		var runs atomic.Int64
		stop := make(chan struct{})
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			select { // never answers while the test runs
			case <-stop:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(backend.Close)
		t.Cleanup(func() { close(stop) })
		g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant", "-upstream-timeout", "100ms")
		key := idemhttp.GenerateKey()
		resp, body := send(t, "POST", g.url("/charges"), key, "{}")
		wantRule(t, resp, body, http.StatusGatewayTimeout, "upstream-timeout")
		if resp.Header.Get(idemhttp.NotStoredHeader) != "outcome-unknown" {
			t.Fatalf("%s: %q, want outcome-unknown", idemhttp.NotStoredHeader, resp.Header.Get(idemhttp.NotStoredHeader))
		}
		resp, body = send(t, "POST", g.url("/charges"), key, "{}")
		wantRule(t, resp, body, http.StatusInternalServerError, "response-not-replayable")
		if runs.Load() != 1 {
			t.Fatalf("the backend received %d requests, want 1", runs.Load())
		}
	})
	t.Run("unreachable upstream", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		g := startGateway(t, deps{}, "-store", "memory", "-upstream", "http://"+addr, "-single-tenant")
		key := idemhttp.GenerateKey()
		for range 2 { // released: the retry tries the backend again
			resp, body := send(t, "POST", g.url("/charges"), key, "{}")
			wantRule(t, resp, body, http.StatusBadGateway, "upstream-unreachable")
		}
	})
	t.Run("stalled body", func(t *testing.T) {
		var runs atomic.Int64
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
		t.Cleanup(backend.Close)
		g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant", "-read-timeout", "100ms")
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// 10 of 1000 bytes, then nothing.
		fmt.Fprintf(conn, "POST /charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: %s\r\nContent-Length: 1000\r\n\r\n0123456789", idemhttp.GenerateKey())
		_ = conn.SetReadDeadline(time.Now().Add(hangGuard)) // a hang guard, not the bound under test
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "unreadable-body") {
				t.Fatalf("a stalled body: %d %s; want 400 unreadable-body or the connection closed", res.StatusCode, b)
			}
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the gateway kept a stalled body's connection open for %v", hangGuard)
		}
		if runs.Load() != 0 {
			t.Fatalf("the backend received %d requests, want 0", runs.Load())
		}
	})
}

// TestReplayFidelity (class 4): -stored-headers chooses the response
// fields replayed (custom ones included); Set-Cookie is never stored; an
// Expect: 100-continue is not forwarded (the gateway has the whole body),
// so the backend's answer to it is never stored.
func TestReplayFidelity(t *testing.T) {
	var runs atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			w.WriteHeader(http.StatusExpectationFailed)
			return
		}
		n := runs.Add(1)
		w.Header().Set("X-Payment-Id", fmt.Sprintf("pay_%d", n))
		w.Header().Set("X-Request-Id", "req")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	t.Cleanup(backend.Close)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant",
		"-stored-headers", "Content-Type,X-Payment-Id")
	key := idemhttp.GenerateKey()
	first, fb := send(t, "POST", g.url("/charges"), key, "{}", "Expect", "100-continue")
	again, ab := send(t, "POST", g.url("/charges"), key, "{}")
	if first.StatusCode != 201 || again.StatusCode != 201 || fb != ab || again.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("first %d %s, replay %d %s %v", first.StatusCode, fb, again.StatusCode, ab, again.Header)
	}
	if again.Header.Get("X-Payment-Id") != "pay_1" || again.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay lacks a -stored-headers field: %v", again.Header)
	}
	if again.Header.Get("X-Request-Id") != "" || again.Header.Get("Set-Cookie") != "" {
		t.Fatalf("replay has a field not in -stored-headers, or Set-Cookie: %v", again.Header)
	}
	if first.Header.Get("Set-Cookie") == "" {
		t.Fatalf("the first client lost its Set-Cookie: %v", first.Header)
	}
	if runs.Load() != 1 {
		t.Fatalf("the backend ran %d times, want 1", runs.Load())
	}
}

// TestRoutesNormalised (class 5): -routes 'POST /charges' protects the
// spellings a backend that ignores case, repeated slashes or a trailing
// slash processes as that route: /charges/, /CHARGES, //charges. They
// need a key, and share the route's key space.
func TestRoutesNormalised(t *testing.T) {
	b := newChargeBackend(t)
	// A backend that ignores case and slashes (no ServeMux: it would
	// redirect //charges).
	lenient := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/charges"
		b.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(lenient.Close)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", lenient.URL, "-single-tenant", "-routes", "POST /charges")
	for i, path := range []string{"/charges/", "/CHARGES", "/Charges/", "//charges"} {
		resp, body := send(t, "POST", g.url(path), "", "{}")
		wantRule(t, resp, body, http.StatusBadRequest, "missing-key")
		key := idemhttp.GenerateKey()
		for range 2 {
			if resp, body := send(t, "POST", g.url(path), key, "{}"); resp.StatusCode != 201 {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
		b.wantCharges(t, int64(i+1))
	}
	// Another route passes through, as documented.
	if resp, body := send(t, "POST", g.url("/refunds"), "", "{}"); resp.StatusCode != 201 {
		t.Fatalf("/refunds: %d %s", resp.StatusCode, body)
	}
}

// TestDeriveWindowCallers (issue 33, class 4): -single-tenant with
// -derive-window: identical keyless requests from two callers (different
// Authorization) are two charges; the same caller's retry is one.
func TestDeriveWindowCallers(t *testing.T) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant", "-derive-window", "30s")
	for _, auth := range []string{"Bearer alice", "Bearer bob", "Bearer alice"} {
		resp, body := send(t, "POST", g.url("/charges"), "", `{"amount":5}`, "Authorization", auth)
		if resp.StatusCode != 201 {
			t.Fatalf("%s: %d %s", auth, resp.StatusCode, body)
		}
	}
	b.wantCharges(t, 2)
}

var _ = context.Background

// TestUpstreamBreaksMidBody (classes 1 and 3): a backend that answered
// its status and part of its body, then broke the connection, acted: the
// client's response is cut (never completed as if whole), and the key
// stays decided: the retry is refused, the backend ran once.
func TestUpstreamBreaksMidBody(t *testing.T) {
	var runs atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "0123456789")
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}))
	backend.Config.ErrorLog = discardStdLog()
	t.Cleanup(backend.Close)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant")
	key := idemhttp.GenerateKey()
	req, _ := http.NewRequest("POST", g.url("/charges"), strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, key)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := c.Do(req); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode < 500 {
			t.Fatalf("a response cut by the backend reached the client whole: %d %q", resp.StatusCode, b)
		}
	}
	resp, body := send(t, "POST", g.url("/charges"), key, "{}")
	wantRule(t, resp, body, http.StatusInternalServerError, "response-not-replayable")
	if runs.Load() != 1 {
		t.Fatalf("the backend ran %d times, want 1", runs.Load())
	}
}
