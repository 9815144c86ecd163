// Command orders plays the failure stories of the idempotency articles
// against the generated wrapper of the billing service, and prints, per
// order, how many times money actually moved.
//
//	go run ./examples/orders            # on the embedded in-memory store
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/idemgen/idemgen/examples/orders/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	storeFlag := flag.String("store", "memory", "where idempotency records live: memory")
	verbose := flag.Bool("v", false, "log every executor event")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *storeFlag, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// demo holds the service under test and what the stories observe.
type demo struct {
	out     io.Writer
	ledger  *billing.MemLedger
	gateway *scriptedGateway
	svc     *billing.IdempotentService
}

func run(ctx context.Context, out io.Writer, storeName string, verbose bool) error {
	if storeName != "memory" {
		return fmt.Errorf("unknown -store %q (want memory)", storeName)
	}
	var opts []idem.Option
	if verbose {
		opts = append(opts, idem.WithObserver(idem.LogEvents(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))))
	}
	ex := idem.NewExecutor(memstore.New(), opts...)
	d := &demo{
		out:     out,
		ledger:  billing.NewMemLedger(map[string]int64{"alice": 100_000, "bob": 1_000, "carol": 50_000, "dave": 50_000}),
		gateway: newScriptedGateway(),
	}
	d.svc = billing.NewIdempotentService(&billing.Service{Ledger: d.ledger, Gateway: d.gateway}, ex)
	fmt.Fprintln(out, "idemgen demo: billing.Service wrapped by the generated IdempotentService, memory store")

	stories := []struct {
		title string
		play  func(context.Context) error
	}{
		{"double click: two concurrent Pay calls for one order", d.doubleClick},
		{"client timeout: the payment succeeded, the response was lost, the client retries", d.lostResponse},
		{"same key, different amount", d.differentAmount},
		{"business failure: insufficient funds is stored and replayed", d.businessFailure},
		{"transient failure: a gateway timeout releases the key, the retry executes", d.transientFailure},
		{"crash mid-call: the worker dies holding the key, a retry takes over after the lease", d.crash},
		{"at-least-once queue: the same shipment message delivered twice", d.redelivery},
	}
	for i, s := range stories {
		fmt.Fprintf(out, "\n%d. %s\n", i+1, s.title)
		if err := s.play(ctx); err != nil {
			return fmt.Errorf("story %d: %w", i+1, err)
		}
	}
	return d.summary()
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, "   "+format+"\n", args...) }

func (d *demo) doubleClick(ctx context.Context) error {
	order := &billing.Order{ID: "A-1001", Customer: "alice", Amount: 4200}
	d.gateway.plan(order.ID, slow(200*time.Millisecond))
	var wg sync.WaitGroup
	receipts := make([]*billing.Receipt, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { receipts[i], errs[i] = d.svc.Pay(ctx, order, "pay") })
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			return errs[i]
		}
		d.say("click %d: receipt %s, balance %d", i+1, receipts[i].PaymentID, receipts[i].Balance)
	}
	return nil
}

func (d *demo) lostResponse(ctx context.Context) error {
	order := &billing.Order{ID: "A-1002", Customer: "alice", Amount: 1500}
	d.gateway.plan(order.ID, slow(300*time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The server finishes the payment; its response never reaches the client.
		_, _ = d.svc.Pay(ctx, order, "pay")
	}()
	select {
	case <-done:
		return errors.New("the first call should still be running")
	case <-time.After(100 * time.Millisecond):
		d.say("attempt 1: client timed out after 100ms (the server is still paying)")
	}
	<-done
	r, err := d.svc.Pay(ctx, order, "pay")
	if err != nil {
		return err
	}
	d.say("attempt 2: replayed receipt %s, balance %d (no second charge)", r.PaymentID, r.Balance)
	return nil
}

func (d *demo) differentAmount(ctx context.Context) error {
	order := &billing.Order{ID: "A-1002", Customer: "alice", Amount: 9900}
	_, err := d.svc.Pay(ctx, order, "pay")
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		return fmt.Errorf("want ErrPayloadMismatch, got %v", err)
	}
	d.say("refused: %v", err)
	return nil
}

func (d *demo) businessFailure(ctx context.Context) error {
	order := &billing.Order{ID: "B-2001", Customer: "bob", Amount: 5000}
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := d.svc.Pay(ctx, order, "pay")
		if !errors.Is(err, billing.ErrInsufficientFunds) {
			return fmt.Errorf("attempt %d: want ErrInsufficientFunds, got %v", attempt, err)
		}
		d.say("attempt %d: %v (errors.Is ErrInsufficientFunds: true)", attempt, err)
	}
	d.say("gateway authorizations: %d", d.gateway.calls(order.ID))
	return nil
}

func (d *demo) transientFailure(ctx context.Context) error {
	order := &billing.Order{ID: "C-3001", Customer: "carol", Amount: 2500}
	d.gateway.plan(order.ID, fail(billing.ErrGatewayTimeout))
	if _, err := d.svc.Pay(ctx, order, "pay"); !errors.Is(err, billing.ErrGatewayTimeout) {
		return fmt.Errorf("attempt 1: want ErrGatewayTimeout, got %v", err)
	} else {
		d.say("attempt 1: %v (key released)", err)
	}
	r, err := d.svc.Pay(ctx, order, "pay")
	if err != nil {
		return err
	}
	d.say("attempt 2: receipt %s, balance %d", r.PaymentID, r.Balance)
	return nil
}

func (d *demo) crash(ctx context.Context) error {
	order := &billing.Order{ID: "D-4001", Customer: "dave", Amount: 3000}
	d.gateway.plan(order.ID, crash())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.svc.Pay(ctx, order, "pay") // the worker dies inside the gateway call
	}()
	<-done
	d.say("worker 1 crashed while holding the key (no release, no outcome)")
	start := time.Now()
	r, err := d.svc.Pay(ctx, order, "pay")
	if err != nil {
		return err
	}
	d.say("retry waited %.1fs for the 1s lease to lapse, took over, receipt %s", time.Since(start).Seconds(), r.PaymentID)
	return nil
}

func (d *demo) redelivery(ctx context.Context) error {
	msg := billing.ShipmentMessage{ID: "msg-77", OrderID: "A-1001", Points: 42}
	for delivery := 1; delivery <= 2; delivery++ {
		if err := d.svc.HandleShipment(ctx, msg); err != nil {
			return err
		}
		d.say("delivery %d: handled; order %s has %d points", delivery, msg.OrderID, d.ledger.Points(msg.OrderID))
	}
	return nil
}

func (d *demo) summary() error {
	fmt.Fprintln(d.out, "\nmoney moved, per order:")
	want := []struct {
		order string
		moves int
	}{{"A-1001", 1}, {"A-1002", 1}, {"B-2001", 0}, {"C-3001", 1}, {"D-4001", 1}}
	ok := true
	for _, w := range want {
		got := d.ledger.Moves(w.order)
		mark := "ok"
		if got != w.moves {
			mark, ok = "WRONG", false
		}
		fmt.Fprintf(d.out, "   %s: %d (want %d) %s\n", w.order, got, w.moves, mark)
	}
	if !ok {
		return errors.New("money moved the wrong number of times")
	}
	return nil
}

// scriptedGateway authorizes payments, following a per-order plan of
// behaviours for its first calls (then it succeeds at once).
type scriptedGateway struct {
	mu    sync.Mutex
	plans map[string][]func(context.Context) error
	count map[string]int
}

func newScriptedGateway() *scriptedGateway {
	return &scriptedGateway{plans: map[string][]func(context.Context) error{}, count: map[string]int{}}
}

func (g *scriptedGateway) plan(order string, steps ...func(context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.plans[order] = steps
}

func (g *scriptedGateway) calls(order string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count[order]
}

// Authorize implements billing.Gateway.
func (g *scriptedGateway) Authorize(ctx context.Context, o *billing.Order) error {
	g.mu.Lock()
	g.count[o.ID]++
	var step func(context.Context) error
	if p := g.plans[o.ID]; len(p) > 0 {
		step, g.plans[o.ID] = p[0], p[1:]
	}
	g.mu.Unlock()
	if step == nil {
		return nil
	}
	return step(ctx)
}

func slow(d time.Duration) func(context.Context) error {
	return func(context.Context) error { time.Sleep(d); return nil }
}

func fail(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

// crash ends the calling goroutine as a process crash would end the worker:
// no error is returned, no deferred release runs to completion of the call.
func crash() func(context.Context) error {
	return func(context.Context) error { runtime.Goexit(); return nil }
}
