// Command gateway shows the layers of idempotency together (docs/LAYERS.md),
// with idemgateway at the edge of a service that is not changed for it:
//
//   - the client's SDK (idemhttp.Transport) makes one Idempotency-Key per
//     logical request and keeps it across its retries;
//   - the gateway (cmd/idemgateway, run in process) deduplicates by that
//     key, scoped by tenant and route, in front of the service;
//   - inside the service, the generated wrapper of billing.Service
//     deduplicates Charge by the business key, the invoice.
//
// Each scenario prints what reached the service, and which layer caught
// the duplicate: the edge catches what has a client key (a lost response's
// retry, a key reused with another body, an endpoint with no business key);
// the business layer catches what the edge cannot see (two keys for one
// invoice, a retry after the edge lost its record). Run it:
//
//	cd examples/gateway && go run .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/idemgen/idemgen/cmd/idemgateway/gateway"
	"github.com/idemgen/idemgen/examples/gateway/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	if _, err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gateway example:", err)
		os.Exit(1)
	}
}

// service is the billing service's HTTP API: Charge through the generated
// wrapper, Tip straight (it has no business key).
func service(svc *billing.IdempotentService) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoices/{id}/charge", func(w http.ResponseWriter, r *http.Request) {
		var req billing.ChargeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.InvoiceID = r.PathValue("id")
		c, err := svc.Charge(r.Context(), req)
		switch {
		case errors.Is(err, billing.ErrAmount):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		case idemhttp.WriteError(w, err): // the wrapper's refusals, as problem+json
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("POST /tips", func(w http.ResponseWriter, r *http.Request) {
		n, _ := svc.Tip(r.Context(), 1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "tip %d\n", n)
	})
	return mux
}

// errLost is a response lost on the way back to the client.
var errLost = errors.New("response lost")

// lossy loses the next responses it is told to, after the request was
// served: the client sees an error for work that was done.
type lossy struct {
	base http.RoundTripper
	drop atomic.Int32
}

func (l *lossy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err == nil && l.drop.Add(-1) >= 0 {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errLost
	}
	l.drop.Store(0)
	return resp, err
}

// world is the service, the gateway in front of it and a client.
type world struct {
	svc     *billing.Service
	gw      string // the gateway's base URL
	stopGW  func() error
	upURL   string
	network *lossy
	client  *http.Client
}

// startGateway runs idemgateway in front of the service, on the memory
// store (a restart loses its records: scenario 4).
func (w *world) startGateway() error {
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, []string{
			"-listen", "127.0.0.1:0", "-upstream", w.upURL, "-store", "memory",
			"-routes", "POST /invoices/{id}/charge,POST /tips", "-tenant-header", "X-Account", "-log-level", "warn",
		}, func(string) string { return "" }, os.Stderr, func(a string) { addr <- a })
	}()
	select {
	case a := <-addr:
		w.gw = "http://" + a
		w.stopGW = func() error { cancel(); return <-done }
		return nil
	case err := <-done:
		cancel()
		return err
	}
}

// answer is what the client got.
type answer struct {
	status   int
	body     string
	replayed bool // by the gateway
}

// send makes one logical request with key: the SDK sends it, and sends it
// again with the same key after a lost response (up to 3 attempts).
func (w *world) send(key, path, body string) (answer, error) {
	ctx := idemhttp.ContextWithOutgoingKey(context.Background(), key) // the SDK's key, kept across the retries
	for attempt := 1; ; attempt++ {
		a, err := w.sendOnce(ctx, path, body)
		if errors.Is(err, errLost) && attempt < 3 {
			continue
		}
		return a, err
	}
}

func (w *world) sendOnce(ctx context.Context, path, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", w.gw+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Account", "acct_1") // as the authenticating proxy sets it
	resp, err := w.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	text := strings.TrimSpace(string(b))
	var p idemhttp.Problem
	if resp.Header.Get("Content-Type") == "application/problem+json" && json.Unmarshal(b, &p) == nil {
		text = p.Type[strings.LastIndexByte(p.Type, '#')+1:] + ": " + p.Title
	}
	return answer{resp.StatusCode, text, resp.Header.Get(idemhttp.ReplayedHeader) == "true"}, err
}

// outcome is one scenario's result: what the service did, and who caught
// the duplicate.
type outcome struct {
	name      string
	charges   int // made by the service in this scenario
	tips      int
	caughtBy  string
	responses []answer
}

// run runs the scenarios, printing each to out, and returns them.
func run(out io.Writer) ([]outcome, error) {
	svc := &billing.Service{}
	// The service's own executor and store: the business layer does not
	// share the gateway's. Invoice IDs are the service's own, the same
	// for every account: one key space.
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: service(billing.NewIdempotentService(svc, ex))}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	w := &world{svc: svc, upURL: "http://" + ln.Addr().String(), network: &lossy{base: http.DefaultTransport}}
	w.client = &http.Client{Transport: &idemhttp.Transport{Base: w.network}}
	if err := w.startGateway(); err != nil {
		return nil, err
	}
	defer func() { _ = w.stopGW() }()

	var outcomes []outcome
	scenario := func(name, caughtBy string, f func() ([]answer, error)) error {
		charges, tips := svc.Charges(), svc.Tips()
		answers, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		o := outcome{name: name, charges: svc.Charges() - charges, tips: svc.Tips() - tips, caughtBy: caughtBy, responses: answers}
		outcomes = append(outcomes, o)
		fmt.Fprintf(out, "%s\n  charges made: %d, tips recorded: %d; caught by: %s\n", name, o.charges, o.tips, caughtBy)
		for _, a := range answers {
			fmt.Fprintf(out, "  -> %d %s (replayed by the gateway: %v)\n", a.status, a.body, a.replayed)
		}
		return nil
	}
	one := func(a answer, err error) ([]answer, error) { return []answer{a}, err }
	two := func(a answer, err error, b answer, err2 error) ([]answer, error) {
		return []answer{a, b}, errors.Join(err, err2)
	}

	steps := []struct {
		name, caughtBy string
		f              func() ([]answer, error)
	}{
		{"1. A charge whose response is lost twice; the SDK retries with its key", "the edge (the gateway replays; the service is called once)",
			func() ([]answer, error) {
				w.network.drop.Store(2)
				return one(w.send("k-1", "/invoices/inv_1/charge", `{"amount":100}`))
			}},
		{"2. A tip whose response is lost; the SDK retries with its key", "the edge alone (a tip has no business key, so no wrapper)",
			func() ([]answer, error) {
				w.network.drop.Store(1)
				return one(w.send("k-2", "/tips", `{}`))
			}},
		{"3. The key of invoice 1 reused for another invoice (a client bug)", "the edge (422 key-reused; the wrapper would charge invoice 2)",
			func() ([]answer, error) { return one(w.send("k-1", "/invoices/inv_2/charge", `{"amount":100}`)) }},
		{"4. Two keys for one invoice (a double click that made a new key)", "the business layer (the gateway sees two requests; the wrapper charges once)",
			func() ([]answer, error) {
				a, err := w.send("k-4a", "/invoices/inv_4/charge", `{"amount":40}`)
				b, err2 := w.send("k-4b", "/invoices/inv_4/charge", `{"amount":40}`)
				return two(a, err, b, err2)
			}},
		{"5. The gateway restarts (memory store: its records are lost) between a lost response and the retry", "the business layer (the retry passes the new gateway; the wrapper replays)",
			func() ([]answer, error) {
				ctx := idemhttp.ContextWithOutgoingKey(context.Background(), "k-5")
				w.network.drop.Store(1)
				if _, err := w.sendOnce(ctx, "/invoices/inv_5/charge", `{"amount":50}`); !errors.Is(err, errLost) {
					return nil, fmt.Errorf("the first response was not lost: %v", err)
				}
				if err := w.stopGW(); err != nil {
					return nil, err
				}
				if err := w.startGateway(); err != nil {
					return nil, err
				}
				return one(w.sendOnce(ctx, "/invoices/inv_5/charge", `{"amount":50}`))
			}},
		{"6. Invoice 4 charged again with another amount, under a new key", "the business layer (422: the invoice was charged with another amount; the gateway saw a new key)",
			func() ([]answer, error) { return one(w.send("k-6", "/invoices/inv_4/charge", `{"amount":41}`)) }},
	}
	for _, s := range steps {
		if err := scenario(s.name, s.caughtBy, s.f); err != nil {
			return outcomes, err
		}
	}
	fmt.Fprintf(out, "in all: %d charges (invoices 1, 4 and 5), %d tip\n", svc.Charges(), svc.Tips())
	return outcomes, nil
}
