package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// flakyTransport fails the first attempt after the server got the request
// (the response is lost) and passes the others through.
type flakyTransport struct {
	base  http.RoundTripper
	calls atomic.Int64
	keys  sync.Map
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := f.calls.Add(1)
	f.keys.Store(n, req.Header.Get(idemhttp.Header))
	resp, err := f.base.RoundTrip(req)
	if n == 1 && err == nil {
		resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer (simulated)")}
	}
	return resp, err
}

func (f *flakyTransport) distinctKeys() map[string]bool {
	m := map[string]bool{}
	f.keys.Range(func(_, v any) bool { m[v.(string)] = true; return true })
	return m
}

func testTransportRetries(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprintf(w, "order %d", e.runs.Load())
	})
	srv := loopback(t, e.h)

	// 1. A retry loop that sends the same *http.Request again (GetBody),
	//    through an http.Client with a Timeout (which forks the request;
	//    the Timeout only guards against a hang).
	flaky := &flakyTransport{base: srv.Client().Transport}
	client := &http.Client{Timeout: hangGuard, Transport: &idemhttp.Transport{Base: flaky}}
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"item":"x"}`))
	var resp *http.Response
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			req.Body, _ = req.GetBody()
		}
		if resp, err = client.Do(req); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "order 1" || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("loop retry: %q %v", b, resp.Header)
	}
	if keys := flaky.distinctKeys(); len(keys) != 1 || flaky.calls.Load() != 2 {
		t.Fatalf("keys across attempts %v, %d attempts", keys, flaky.calls.Load())
	}
	e.wantRuns(1)

	// 2. A retrying RoundTripper wrapping idemhttp.Transport.
	flaky2 := &flakyTransport{base: srv.Client().Transport}
	retrying := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		inner := &idemhttp.Transport{Base: flaky2}
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				req.Body, _ = req.GetBody()
			}
			resp, err := inner.RoundTrip(req)
			if err == nil || attempt == 2 {
				return resp, err
			}
		}
	})
	st, h, body, err := postVia(context.Background(), &http.Client{Transport: retrying}, srv.URL+"/orders", `{"item":"y"}`)
	if err != nil || st != 201 || body != "order 2" || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("retrying transport: %d %q %v %v", st, body, h, err)
	}
	if keys := flaky2.distinctKeys(); len(keys) != 1 {
		t.Fatalf("keys across attempts %v", keys)
	}
	e.wantRuns(2)

	// 3. A loop that builds a new request per attempt, with ContextWithOutgoingKey.
	flaky3 := &flakyTransport{base: srv.Client().Transport}
	c3 := &http.Client{Transport: &idemhttp.Transport{Base: flaky3, Quoted: true}}
	ctx := idemhttp.ContextWithOutgoingKey(context.Background(), idemhttp.GenerateKey())
	for attempt := 0; ; attempt++ {
		st, h, body, err = postVia(ctx, c3, srv.URL+"/orders", `{"item":"z"}`)
		if err == nil || attempt == 2 {
			break
		}
	}
	if err != nil || body != "order 3" || h.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("new request per attempt: %d %q %v", st, body, err)
	}
	k, _ := idemhttp.OutgoingKeyFromContext(ctx)
	if keys := flaky3.distinctKeys(); len(keys) != 1 || !keys[idemhttp.FormatKey(k)] {
		t.Fatalf("keys across attempts %v, want %q", keys, k)
	}
	e.wantRuns(3)
}

// TestTransportKeepsKeyAcrossRetries checks idemhttp.Transport keeps one key across retries on every store (onEveryStore).
func TestTransportKeepsKeyAcrossRetries(t *testing.T) { onEveryStore(t, testTransportRetries) }
