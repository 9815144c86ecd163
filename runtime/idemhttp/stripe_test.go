package idemhttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// testStripeChargesOnce points stripe-go, a client library that keeps one
// Idempotency-Key across its own retries, at a local POST /v1/charges
// behind the middleware. The first attempt times out mid-handler (the
// response is lost); stripe-go retries with the same key and gets the
// stored charge: the card is charged once.
func testStripeChargesOnce(t *testing.T, newStore newStoreFunc) {
	var charges atomic.Int64
	var mu sync.Mutex
	var keys []string
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n := charges.Add(1)
		if n == 1 {
			time.Sleep(400 * time.Millisecond) // longer than the client's timeout
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_"+r.Form.Get("amount"))
		amount, _ := strconv.ParseInt(r.Form.Get("amount"), 10, 64)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "ch_" + strconv.FormatInt(n, 10), "object": "charge",
			"amount": amount, "currency": r.Form.Get("currency"), "paid": true,
		})
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", charge)
	ex := idem.NewExecutor(newStore(t), idem.SingleTenant())
	// Tenant: the API key, as Stripe scopes keys by account.
	tenant := func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") }
	mw := idemhttp.New(ex, idemhttp.WithTenant(tenant))(mux)
	// Every attempt's key, as it reaches the middleware.
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(idemhttp.Header))
		mu.Unlock()
		mw.ServeHTTP(w, r)
	}))

	retries := int64(3)
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(srv.URL),
		HTTPClient:        &http.Client{Timeout: 150 * time.Millisecond},
		MaxNetworkRetries: &retries,
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := stripe.NewClient("sk_test_local", stripe.WithBackends(backends))
	ch, err := sc.V1Charges.Create(context.Background(), &stripe.ChargeCreateParams{
		Amount: stripe.Int64(2000), Currency: stripe.String("usd"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ch.ID != "ch_1" || ch.Amount != 2000 {
		t.Fatalf("charge %+v", ch)
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("charged %d times", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) < 2 || keys[0] == "" {
		t.Fatalf("attempts' keys %q: want a retry", keys)
	}
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("attempts' keys %q: want one key", keys)
		}
	}
	if ch.LastResponse == nil || ch.LastResponse.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("last response: %+v", ch.LastResponse)
	}
}
