// Command orders plays the failure stories of the idempotency articles
// against the generated wrapper of the billing service, and prints, per
// order, how many times money actually moved.
//
//	go run ./examples/orders                          # on the embedded in-memory store
//	go run ./examples/orders -store postgres://...    # on PostgreSQL, transactional mode
//
// On PostgreSQL the demo works in a schema of its own, created for the run
// and dropped at its end, and the ledger's rows are written in the same
// transaction as the idempotency record (pgstore.NewTx, pgstore.TxFrom).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/orders/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

func main() {
	storeFlag := flag.String("store", "memory", "where idempotency records and the ledger live: memory, or a postgres:// URL")
	verbose := flag.Bool("v", false, "log every executor event")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *storeFlag, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// demo holds the service under test and what the stories observe.
type demo struct {
	out      io.Writer
	ledger   ledgerView
	gateway  *scriptedGateway
	svc      *billing.IdempotentService
	postgres bool
}

// ledgerView reads what the ledger did, whichever ledger it is.
type ledgerView interface {
	Moves(ctx context.Context, order string) (int, error)
	Points(ctx context.Context, order string) (int, error)
}

// memView adapts billing.MemLedger to ledgerView.
type memView struct{ *billing.MemLedger }

func (m memView) Moves(_ context.Context, order string) (int, error) {
	return m.MemLedger.Moves(order), nil
}
func (m memView) Points(_ context.Context, order string) (int, error) {
	return m.MemLedger.Points(order), nil
}

var balances = map[string]int64{"alice": 100_000, "bob": 1_000, "carol": 50_000, "dave": 50_000}

func run(ctx context.Context, out io.Writer, storeName string, verbose bool) error {
	opts := []idem.Option{idem.SingleTenant()} // the demo has one client
	if verbose {
		opts = append(opts, idem.WithObserver(idem.LogEvents(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))))
	}
	d := &demo{out: out, gateway: newScriptedGateway()}
	var store idem.Store
	var ledger billing.Ledger
	switch {
	case storeName == "memory":
		mem := billing.NewMemLedger(balances)
		store, ledger, d.ledger = memstore.New(), mem, memView{mem}
	case strings.HasPrefix(storeName, "postgres://"), strings.HasPrefix(storeName, "postgresql://"):
		pool, cleanup, err := demoSchema(ctx, storeName)
		if err != nil {
			return err
		}
		defer cleanup()
		txStore := pgstore.NewTx(pool)
		if err := txStore.Migrate(ctx); err != nil {
			return err
		}
		pg := billing.NewPGLedger(pool)
		if err := pg.Setup(ctx, balances); err != nil {
			return err
		}
		store, ledger, d.ledger, d.postgres = txStore, pg, pg, true
	default:
		return fmt.Errorf("unknown -store %q (want memory or a postgres:// URL)", storeName)
	}
	ex := idem.NewExecutor(store, opts...)
	d.svc = billing.NewIdempotentService(&billing.Service{Ledger: ledger, Gateway: d.gateway}, ex)
	where := "memory store"
	if d.postgres {
		where = "PostgreSQL, ledger rows in the record's transaction"
	}
	fmt.Fprintln(out, "idemgen demo: billing.Service wrapped by the generated IdempotentService,", where)

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
	return d.summary(ctx)
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
		return fmt.Errorf("want ErrPayloadMismatch, got %w", err)
	}
	d.say("refused: %v", err)
	return nil
}

func (d *demo) businessFailure(ctx context.Context) error {
	order := &billing.Order{ID: "B-2001", Customer: "bob", Amount: 5000}
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := d.svc.Pay(ctx, order, "pay")
		if !errors.Is(err, billing.ErrInsufficientFunds) {
			return fmt.Errorf("attempt %d: want ErrInsufficientFunds, got %w", attempt, err)
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
		return fmt.Errorf("attempt 1: want ErrGatewayTimeout, got %w", err)
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
	if d.postgres {
		d.say("the crash rolled back worker 1's transaction: the retry claimed the key at once, receipt %s", r.PaymentID)
	} else {
		d.say("retry waited %.1fs for the 1s lease to lapse, took over, receipt %s", time.Since(start).Seconds(), r.PaymentID)
	}
	return nil
}

func (d *demo) redelivery(ctx context.Context) error {
	msg := billing.ShipmentMessage{ID: "msg-77", OrderID: "A-1001", Points: 42}
	for delivery := 1; delivery <= 2; delivery++ {
		if err := d.svc.HandleShipment(ctx, msg); err != nil {
			return err
		}
		points, err := d.ledger.Points(ctx, msg.OrderID)
		if err != nil {
			return err
		}
		d.say("delivery %d: handled; order %s has %d points", delivery, msg.OrderID, points)
	}
	return nil
}

func (d *demo) summary(ctx context.Context) error {
	fmt.Fprintln(d.out, "\nmoney moved, per order:")
	want := []struct {
		order string
		moves int
	}{{"A-1001", 1}, {"A-1002", 1}, {"B-2001", 0}, {"C-3001", 1}, {"D-4001", 1}}
	ok := true
	for _, w := range want {
		got, err := d.ledger.Moves(ctx, w.order)
		if err != nil {
			return err
		}
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

// crash ends the worker as a process crash would. In memory, the calling
// goroutine ends: no error is returned and nothing is released. On
// PostgreSQL, the worker's connection dies, as it would with its process, so
// the server rolls its transaction back, claim and ledger rows included (the
// goroutine itself returns, so that the demo's pool can close).
func crash() func(context.Context) error {
	return func(ctx context.Context) error {
		if tx, ok := pgstore.TxFrom(ctx); ok {
			_, _ = tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return errors.New("worker crashed: connection lost")
		}
		runtime.Goexit()
		return nil
	}
}

// demoSchema connects to dsn, creates a schema of the demo's own and returns
// a pool whose search_path is that schema, and a cleanup that drops it.
func demoSchema(ctx context.Context, dsn string) (*pgxpool.Pool, func(), error) {
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "idemgen_demo_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create schema: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		admin.Close()
		return nil, nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		admin.Close()
		return nil, nil, err
	}
	cleanup := func() {
		pool.Close()
		_, _ = admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
	return pool, cleanup, nil
}
