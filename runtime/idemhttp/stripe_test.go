package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

// TestStripeGoChargesOnce runs testStripeChargesOnce on every store
// (onEveryStore).
func TestStripeGoChargesOnce(t *testing.T) { onEveryStore(t, testStripeChargesOnce) }

// testStripeChargesOnce points stripe-go, a client library that keeps one
// Idempotency-Key across its own retries, at a local POST /v1/charges
// behind the middleware. The first attempt times out mid-handler (the
// response is lost); stripe-go retries with the same key and gets the
// stored charge: the card is charged once.
//
// The timeout is made by events, not by the clock: the client's transport
// gives up on the first attempt once its handler started (so the claim is
// made first), the handler finishes once the client gave up, and the
// retries go out once the first charge is stored, whatever the scheduling.
func testStripeChargesOnce(t *testing.T, newStore newStoreFunc) {
	var charges atomic.Int64
	var mu sync.Mutex
	var keys []string
	started, gaveUp, stored := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var storedOnce sync.Once
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n := charges.Add(1)
		if n == 1 {
			close(started)
			select {
			case <-gaveUp: // the client's timeout fired mid-handler
			case <-time.After(hangGuard):
				t.Error("the client did not give up on the first attempt")
			}
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
	ex := idem.NewExecutor(newStore(t), idem.SingleTenant(), idem.WithLease(hangGuard), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventCompleted {
			storedOnce.Do(func() { close(stored) })
		}
	}))
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
		HTTPClient:        &http.Client{Transport: &impatientTransport{base: srv.Client().Transport, started: started, gaveUp: gaveUp, stored: stored}},
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

// impatientTransport is a client whose timeout fires on its first attempt
// once that attempt's handler started (closing gaveUp when the attempt has
// ended), and whose later attempts go out once the first outcome is stored.
type impatientTransport struct {
	base                    http.RoundTripper
	started, gaveUp, stored chan struct{}
	calls                   atomic.Int64
}

func (tr *impatientTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr.calls.Add(1) > 1 {
		if err := waitClosed(req.Context(), tr.stored, "the first charge stored"); err != nil {
			return nil, err
		}
		return tr.base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.base.RoundTrip(req.WithContext(ctx))
		done <- result{resp, err}
	}()
	if err := waitClosed(req.Context(), tr.started, "the handler started"); err != nil {
		return nil, err
	}
	cancel() // the timeout, after the claim
	if r := <-done; r.err == nil {
		r.resp.Body.Close()
		return nil, errors.New("the first attempt was answered before its timeout")
	}
	close(tr.gaveUp)
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout (the client's timeout)")}
}

// waitClosed waits for ch to be closed, for ctx's end, or for hangGuard.
func waitClosed(ctx context.Context, ch <-chan struct{}, what string) error {
	guard := time.NewTimer(hangGuard)
	defer guard.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-guard.C:
		return fmt.Errorf("waited %v for %s", hangGuard, what)
	}
}
