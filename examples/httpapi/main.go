// Command httpapi serves the billing service of examples/orders (its
// generated IdempotentService) as an HTTP order API behind the idemhttp
// middleware, and plays two stories against it over loopback, with a client
// whose idemhttp.Transport sets the Idempotency-Key.
//
// Usage:
//
//	go run ./examples/httpapi
//
// First, a lost response: the client times out while the payment runs and
// retries the same request (same key); the retry gets the stored response,
// and the money moved once. Second, a key reused with another body: refused
// with 422.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/examples/orders/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(1)
	}
}

// slowGateway authorizes every payment, the first one slowly: slower than
// the client's timeout, so that its response is lost.
type slowGateway struct{ calls atomic.Int64 }

func (g *slowGateway) Authorize(ctx context.Context, _ *billing.Order) error {
	if g.calls.Add(1) == 1 {
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// payRequest is the body of POST /orders/{id}/pay.
type payRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// api is the order API: the HTTP face of the billing service.
type api struct {
	svc  *billing.IdempotentService
	runs atomic.Int64 // handler executions
}

func (a *api) pay(w http.ResponseWriter, r *http.Request) {
	a.runs.Add(1)
	var req payRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	order := &billing.Order{ID: r.PathValue("id"), Customer: req.Customer, Amount: req.Amount}
	rcpt, err := a.svc.Pay(r.Context(), order, "pay")
	switch {
	case errors.Is(err, billing.ErrInsufficientFunds), errors.Is(err, billing.ErrOrderClosed):
		http.Error(w, err.Error(), http.StatusPaymentRequired) // stored: a business outcome
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable) // not stored: the key is released
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+rcpt.PaymentID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(rcpt)
}

// tenant scopes keys by the caller's API key (here, the bearer token as is;
// a real service would map it to its account).
func tenant(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// newServer returns the order API behind the middleware.
func newServer(ex *idem.Executor, a *api) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}/pay", a.pay)
	return idemhttp.New(ex,
		idemhttp.WithTenant(tenant),
		idemhttp.WithTTL(24*time.Hour),
		idemhttp.WithLease(5*time.Second),       // longer than a payment ever takes
		idemhttp.WithMaxRetryAfter(time.Second), // but payments usually take far less
	)(mux)
}

// client posts with keys from idemhttp.Transport and retries on timeouts,
// 409 and 503 (the statuses that come with Retry-After: the key is in flight,
// or nothing was processed), re-sending the same *http.Request: the key that
// Transport set on it the first time goes with every retry. Other refusals
// (4xx, and the middleware's 500s) answer every retry the same way.
type client struct {
	http   *http.Client
	out    io.Writer
	apiKey string
}

func (c *client) post(ctx context.Context, url string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			req.Body, _ = req.GetBody()
		}
		resp, err := c.http.Do(req)
		key := req.Header.Get(idemhttp.Header)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && attempt < 5 {
				fmt.Fprintf(c.out, "   attempt %d  key %s  -> no response: client timeout; retrying with the same key\n", attempt, key)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return nil, nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		if (resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable) && attempt < 5 {
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			fmt.Fprintf(c.out, "   attempt %d  key %s  -> %d %s, Retry-After: %ds\n", attempt, key, resp.StatusCode, http.StatusText(resp.StatusCode), wait)
			time.Sleep(time.Duration(max(wait, 1)) * time.Second)
			continue
		}
		fmt.Fprintf(c.out, "   attempt %d  key %s  -> %d, Idempotent-Replayed: %q\n", attempt, key, resp.StatusCode, resp.Header.Get(idemhttp.ReplayedHeader))
		return resp, b, nil
	}
}

func run(ctx context.Context, out io.Writer) error {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	ledger := billing.NewMemLedger(map[string]int64{"alice": 100_000})
	a := &api{svc: billing.NewIdempotentService(&billing.Service{Ledger: ledger, Gateway: &slowGateway{}}, ex)}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newServer(ex, a), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "order API on %s, behind idemhttp on the memory store\n", base)

	c := &client{
		http:   &http.Client{Timeout: 250 * time.Millisecond, Transport: &idemhttp.Transport{}},
		out:    out,
		apiKey: "sk_alice",
	}

	fmt.Fprintln(out, "\n1. lost response: the payment takes longer than the client waits")
	body, _ := json.Marshal(payRequest{Customer: "alice", Amount: 2500})
	resp, b, err := c.post(ctx, base+"/orders/o-1/pay", body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   response: %s", b)
	fmt.Fprintf(out, "   handler executions: %d, debits of order o-1: %d, alice's balance: %d\n",
		a.runs.Load(), ledger.Moves("o-1"), ledger.Balance("alice"))
	if resp.StatusCode != http.StatusCreated || a.runs.Load() != 1 || ledger.Moves("o-1") != 1 {
		return fmt.Errorf("lost response: status %d, %d executions, %d debits", resp.StatusCode, a.runs.Load(), ledger.Moves("o-1"))
	}

	fmt.Fprintln(out, "\n2. the same key with another body (amount 9900 instead of 2500)")
	key := idemhttp.GenerateKey()
	keyed := idemhttp.ContextWithOutgoingKey(ctx, key) // the Transport sends this key
	if _, _, err := c.post(keyed, base+"/orders/o-2/pay", body); err != nil {
		return err
	}
	other, _ := json.Marshal(payRequest{Customer: "alice", Amount: 9900})
	resp, b, err = c.post(keyed, base+"/orders/o-2/pay", other)
	if err != nil {
		return err
	}
	var p idemhttp.Problem
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("problem body %q: %w", b, err)
	}
	fmt.Fprintf(out, "   %s\n   title:  %s\n   detail: %s\n   type:   %s\n", resp.Header.Get("Content-Type"), p.Title, p.Detail, p.Type)
	fmt.Fprintf(out, "   debits of order o-2: %d, alice's balance: %d\n", ledger.Moves("o-2"), ledger.Balance("alice"))
	if resp.StatusCode != http.StatusUnprocessableEntity || ledger.Moves("o-2") != 1 {
		return fmt.Errorf("reused key: status %d, %d debits", resp.StatusCode, ledger.Moves("o-2"))
	}
	return nil
}
