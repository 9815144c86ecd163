package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func ExampleNew() {
	orders := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	mw := idemhttp.New(ex,
		// Scope keys by caller; without it the service is single-tenant.
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }),
	)
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()

	send := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("X-Account", "acct_1")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Content-Type"))
		if resp.StatusCode < 400 {
			fmt.Printf("  %s\n", b)
		}
	}
	send(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"item":"book"}`) // first: runs the handler
	send(`8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"item":"book"}`)   // retry (bare form): replayed
	send(`8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"item":"pen"}`)    // same key, other body
	send("", `{"item":"book"}`)                                       // no key
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed="" application/json
	//   {"order":1}
	// 201 replayed="true" application/json
	//   {"order":1}
	// 422 replayed="" application/problem+json
	// 400 replayed="" application/problem+json
	// orders created: 1
}

func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("server got a key:", r.Header.Get("Idempotency-Key") != "")
	}))
	defer srv.Close()
	client := &http.Client{Transport: &idemhttp.Transport{}}

	// A fresh UUIDv7 per request, kept if the same request is sent again.
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	// A key of the caller's choosing, for every attempt of one request.
	ctx := idemhttp.ContextWithOutgoingKey(context.Background(), "order-42-pay")
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{}`))
	if resp, err = client.Do(req); err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("sent:", req.Header.Get("Idempotency-Key"))
	// Output:
	// server got a key: true
	// server got a key: true
	// sent: order-42-pay
}

func ExampleParseKey() {
	for _, v := range []string{`"8e03978e"`, `8e03978e`, `"a\"b"`, `""`, "ключ", "k-1, k-2"} {
		k, err := idemhttp.ParseKey(v)
		fmt.Printf("%-12s -> %q %v\n", v, k, err)
	}
	// Output:
	// "8e03978e"   -> "8e03978e" <nil>
	// 8e03978e     -> "8e03978e" <nil>
	// "a\"b"       -> "a\"b" <nil>
	// ""           -> "" idemhttp: Idempotency-Key is empty
	// ключ         -> "" idemhttp: Idempotency-Key has a character outside printable ASCII
	// k-1, k-2     -> "" idemhttp: Idempotency-Key is a list (a comma outside a quoted string); send exactly one key
}

func ExampleWithPolicy() {
	// Stripe-like: once the handler started, every response is stored,
	// failures included, and a retry never runs the handler again.
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	_ = idemhttp.New(ex, idemhttp.SingleTenant(), idemhttp.WithPolicy(idemhttp.StoreAll))

	fmt.Println(idemhttp.DefaultPolicy(201), idemhttp.DefaultPolicy(429), idemhttp.DefaultPolicy(503))
	fmt.Println(idemhttp.StoreAll(201), idemhttp.StoreAll(429), idemhttp.StoreAll(503))
	// Output:
	// true false false
	// true true true
}

// A handler calling a generated wrapper answers the wrapper's refusals in
// the middleware's own problem+json.
func ExampleWriteError() {
	// What a wrapper returns while another request for the same order runs.
	err := fmt.Errorf("place order: %w", &idem.InProgressError{RetryAfter: 2 * time.Second})
	w := httptest.NewRecorder()
	if !idemhttp.WriteError(w, err) {
		http.Error(w, "internal error", http.StatusInternalServerError) // the method's own error
	}
	fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
	// Output: 409 2 application/problem+json
}

// A client that cannot send an Idempotency-Key retries a charge: with
// WithDerivedKey the retry inside the window gets the first answer, marked
// as derived. (Two charges of the same amount made on purpose inside the
// window would be merged too: a fallback only.)
func ExampleWithDerivedKey() {
	charges := 0
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	mw := idemhttp.New(ex,
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }),
		idemhttp.WithDerivedKey(10*time.Second),
	)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", charges)
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount": 100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Account", "acct_1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s derived=%q replayed=%q\n", w.Code, w.Body, w.Header().Get(idemhttp.DerivedKeyHeader), w.Header().Get(idemhttp.ReplayedHeader))
	}
	// Output:
	// 201 charge 1 derived="true" replayed=""
	// 201 charge 1 derived="true" replayed="true"
}
