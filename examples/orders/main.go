// Command orders plays the failure stories of the idempotency articles
// against the generated wrapper of the billing service, and prints, per
// order, how many times money actually moved.
//
//	go run ./examples/orders                          # on the embedded in-memory store
//	go run ./examples/orders -store postgres://...    # on PostgreSQL, transactional mode
//	go run ./examples/orders -store 'mysql://root@tcp(127.0.0.1:3306)/idem'  # on MySQL or MariaDB, transactional mode
//
// On PostgreSQL the demo works in a schema of its own, created for the run
// and dropped at its end, and the ledger's rows are written in the same
// transaction as the idempotency record (pgstore.NewTx, pgstore.TxFrom).
// On MySQL or MariaDB (mysql:// followed by a go-sql-driver/mysql DSN) it
// does the same in a database of its own (mysqlstore.NewTx,
// mysqlstore.TxFrom).
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/orders/billing"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

func main() {
	storeFlag := flag.String("store", "memory", "where idempotency records and the ledger live: memory, a postgres:// URL, or mysql:// and a go-sql-driver/mysql DSN")
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
	mysql    bool
	clock    *storeClock // the memory store's clock (nil on PostgreSQL and MySQL)
	events   recorder
}

// story is one story's title and the executor's events while it played:
// what TestDemo checks each story's claim against.
type story struct {
	title  string
	events []idem.Event
}

// recorder keeps the executor's events (an idem.WithObserver observer).
type recorder struct {
	mu     sync.Mutex
	events []idem.Event
}

func (r *recorder) observe(ev idem.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// take returns the events recorded since the last take.
func (r *recorder) take() []idem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.events
	r.events = nil
	return evs
}

// storeClock is the memory store's clock: the real time plus an offset the
// crash story advances, so that a lease lapses at a known point of the story
// instead of after a real wait (and without depending on the machine's
// speed).
type storeClock struct{ offset atomic.Int64 }

func (c *storeClock) now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

func (c *storeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

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
	_, err := play(ctx, out, storeName, verbose)
	return err
}

// play plays every story and returns, per story, the executor's events.
func play(ctx context.Context, out io.Writer, storeName string, verbose bool) ([]story, error) {
	d := &demo{out: out, gateway: newScriptedGateway()}
	observe := d.events.observe
	if verbose {
		log := idem.LogEvents(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
		observe = func(ev idem.Event) { d.events.observe(ev); log(ev) }
	}
	opts := []idem.Option{idem.SingleTenant(), idem.WithObserver(observe)}
	var store idem.Store
	var ledger billing.Ledger
	switch {
	case storeName == "memory":
		mem := billing.NewMemLedger(balances)
		d.clock = &storeClock{}
		store, ledger, d.ledger = memstore.New(memstore.WithClock(d.clock.now)), &keyedLedger{Ledger: mem}, memView{mem}
	case strings.HasPrefix(storeName, "postgres://"), strings.HasPrefix(storeName, "postgresql://"):
		pool, cleanup, err := demoSchema(ctx, storeName)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		txStore := pgstore.NewTx(pool)
		if err := txStore.Migrate(ctx); err != nil {
			return nil, err
		}
		pg := billing.NewPGLedger(pool)
		if err := pg.Setup(ctx, balances); err != nil {
			return nil, err
		}
		store, ledger, d.ledger, d.postgres = txStore, pg, pg, true
	case strings.HasPrefix(storeName, "mysql://"):
		db, cleanup, err := demoDatabase(ctx, strings.TrimPrefix(storeName, "mysql://"))
		if err != nil {
			return nil, err
		}
		defer cleanup()
		txStore := mysqlstore.NewTx(db)
		if err := txStore.Migrate(ctx); err != nil {
			return nil, err
		}
		my := billing.NewMySQLLedger(db)
		if err := my.Setup(ctx, balances); err != nil {
			return nil, err
		}
		store, ledger, d.ledger, d.mysql = txStore, my, my, true
	default:
		return nil, fmt.Errorf("unknown -store %q (want memory, a postgres:// URL or mysql:// and a DSN)", storeName)
	}
	ex := idem.NewExecutor(store, opts...)
	d.svc = billing.NewIdempotentService(&billing.Service{Ledger: ledger, Gateway: d.gateway}, ex)
	where := "memory store"
	if d.postgres {
		where = "PostgreSQL, ledger rows in the record's transaction"
	}
	if d.mysql {
		where = "MySQL/MariaDB, ledger rows in the record's transaction"
	}
	fmt.Fprintln(out, "idemgen demo: billing.Service wrapped by the generated IdempotentService,", where)

	crashTitle := "stalled worker: it holds the key past its 1s lease, a retry takes the key over, the stalled worker's outcome is refused"
	if d.postgres || d.mysql {
		crashTitle = "crash mid-call: the worker's connection dies holding the key, its transaction rolls back, a retry executes"
	}
	stories := []struct {
		title string
		play  func(context.Context) error
	}{
		{"double click: two concurrent Pay calls for one order", d.doubleClick},
		{"client timeout: the payment succeeded, the response was lost, the client retries", d.lostResponse},
		{"same key, different amount", d.differentAmount},
		{"business failure: insufficient funds is stored and replayed", d.businessFailure},
		{"transient failure: a gateway timeout releases the key, the retry executes", d.transientFailure},
		{crashTitle, d.crash},
		{"at-least-once queue: the same shipment message delivered twice", d.redelivery},
	}
	var played []story
	for i, s := range stories {
		fmt.Fprintf(out, "\n%d. %s\n", i+1, s.title)
		if err := s.play(ctx); err != nil {
			return played, fmt.Errorf("story %d: %w", i+1, err)
		}
		played = append(played, story{title: s.title, events: d.events.take()})
	}
	return played, d.summary(ctx)
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
	if d.postgres || d.mysql {
		return d.crashPostgres(ctx, order)
	}
	entered, resume := make(chan struct{}), make(chan struct{})
	d.gateway.plan(order.ID, stall(entered, resume))
	done := make(chan error, 1)
	go func() {
		_, err := d.svc.Pay(ctx, order, "pay")
		done <- err
	}()
	<-entered
	// The worker stalls inside the gateway call (a GC pause, a stopped
	// process, a partition) while the store's clock goes on.
	d.clock.advance(1500 * time.Millisecond)
	d.say("worker 1 claimed the key and stalled in the gateway; 1.5s passed on the store's clock, its 1s lease lapsed")
	r, err := d.svc.Pay(ctx, order, "pay")
	if err != nil {
		return err
	}
	d.say("the retry took the lapsed key over under a new fencing token: receipt %s", r.PaymentID)
	close(resume)
	err = <-done
	if !errors.Is(err, idem.ErrLeaseLost) {
		return fmt.Errorf("the stalled worker: want ErrLeaseLost, got %v", err)
	}
	d.say("worker 1 woke up: its debit carried the same key and moved no money, and its outcome was refused: %v", err)
	return nil
}

// crashPostgres: the worker's connection dies mid-call, as with its
// process, and the server (PostgreSQL or MySQL) rolls its transaction back; the claim goes with
// it, so the retry claims a free key.
func (d *demo) crashPostgres(ctx context.Context, order *billing.Order) error {
	d.gateway.plan(order.ID, crash())
	if _, err := d.svc.Pay(ctx, order, "pay"); err == nil {
		return errors.New("the crashed worker returned a receipt")
	}
	d.say("worker 1 crashed while holding the key (its connection died)")
	r, err := d.svc.Pay(ctx, order, "pay")
	if err != nil {
		return err
	}
	d.say("the crash rolled back worker 1's transaction: the retry claimed the key at once, receipt %s", r.PaymentID)
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

// stall blocks the call: it closes entered, then waits for resume.
func stall(entered, resume chan struct{}) func(context.Context) error {
	return func(context.Context) error {
		close(entered)
		<-resume
		return nil
	}
}

// crash ends the worker's connection to PostgreSQL, as its process's crash
// would, so the server rolls its transaction back, claim and ledger rows
// included (the goroutine itself returns, so that the demo's pool can close).
func crash() func(context.Context) error {
	return func(ctx context.Context) error {
		if tx, ok := pgstore.TxFrom(ctx); ok {
			_, _ = tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		}
		if tx, ok := mysqlstore.TxFrom(ctx); ok {
			_, _ = tx.ExecContext(ctx, "KILL CONNECTION CONNECTION_ID()")
		}
		return errors.New("worker crashed: connection lost")
	}
}

// keyedLedger moves money once per idempotency key, as a payment API that
// takes idempotency keys does: a debit under the key of a call it already
// debited for (idem.KeyFrom, the key of the wrapped call in progress)
// returns that payment again. It is what keeps a stalled worker, resuming
// after another took its lapsed lease over, from paying twice in lease
// mode, where the store's fencing refuses the stalled worker's outcome but
// cannot undo its side effects.
type keyedLedger struct {
	billing.Ledger
	mu   sync.Mutex
	paid map[string]debit
}

type debit struct {
	id      string
	balance int64
}

// Debit implements billing.Ledger.
func (l *keyedLedger) Debit(ctx context.Context, customer, order string, amount int64) (string, int64, error) {
	key, ok := idem.KeyFrom(ctx)
	if !ok {
		return l.Ledger.Debit(ctx, customer, order, amount)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, seen := l.paid[key]; seen {
		return p.id, p.balance, nil
	}
	id, balance, err := l.Ledger.Debit(ctx, customer, order, amount)
	if err == nil {
		if l.paid == nil {
			l.paid = map[string]debit{}
		}
		l.paid[key] = debit{id, balance}
	}
	return id, balance, err
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

// demoDatabase connects to dsn (a go-sql-driver/mysql DSN), creates a
// database of the demo's own and returns a *sql.DB on it, and a cleanup
// that drops it.
func demoDatabase(ctx context.Context, dsn string) (*sql.DB, func(), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql DSN: %w", err)
	}
	admin, err := openMySQL(cfg)
	if err != nil {
		return nil, nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "idemgen_demo_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		return nil, nil, fmt.Errorf("create database: %w", err)
	}
	cfg = cfg.Clone()
	cfg.DBName = name
	db, err := openMySQL(cfg)
	if err != nil {
		_ = admin.Close()
		return nil, nil, err
	}
	cleanup := func() {
		_ = db.Close()
		_, _ = admin.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE "+name)
		_ = admin.Close()
	}
	return db, cleanup, nil
}

func openMySQL(cfg *mysql.Config) (*sql.DB, error) {
	cfg.Logger = &mysql.NopLogger{} // the crash story kills a connection on purpose
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return sql.OpenDB(c), nil
}
