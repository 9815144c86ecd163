package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/cmd/dbos/orders"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// markKey marks the context of a measured call, so that the tracers count
// its round trips and not those of DBOS's background work (queue runner,
// scheduler, timeouts monitor), which runs on DBOS's root context.
type markKey struct{}

// tracer counts the round trips of measured calls on one pool, as pgx sends
// them: one per query or exec outside a batch, one per batch, one per
// prepare. With recording on, it also keeps their SQL (the -trace listing).
type tracer struct {
	n         atomic.Int64
	recording atomic.Bool
	mu        sync.Mutex
	sql       []string
}

func (t *tracer) count(ctx context.Context, sql func() string) {
	if ctx.Value(markKey{}) == nil {
		return
	}
	t.n.Add(1)
	if t.recording.Load() {
		t.mu.Lock()
		t.sql = append(t.sql, sql())
		t.mu.Unlock()
	}
}

// load returns the count so far.
func (t *tracer) load() int64 { return t.n.Load() }

// record starts keeping the SQL of measured round trips; stop returns it.
func (t *tracer) record() {
	t.mu.Lock()
	t.sql = nil
	t.mu.Unlock()
	t.recording.Store(true)
}

func (t *tracer) stop() []string {
	t.recording.Store(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sql
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.count(ctx, func() string { return d.SQL })
	return ctx
}

func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	t.count(ctx, func() string {
		s := "batch:"
		for _, q := range d.Batch.QueuedQueries {
			s += " [" + q.SQL + "]"
		}
		return s
	})
	return ctx
}

func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TracePrepareStart keeps the statement for TracePrepareEnd, which counts
// it only if it went to the server: a statement the connection has already
// prepared under its name is answered from pgx's map, no round trip (pgstore
// prepares its transactional batch by name, so every call "prepares").
func (t *tracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	return context.WithValue(ctx, prepareSQL{}, d.SQL)
}

// TracePrepareEnd counts a prepare that reached the server.
func (t *tracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if d.AlreadyPrepared {
		return
	}
	sql, _ := ctx.Value(prepareSQL{}).(string)
	t.count(ctx, func() string { return "prepare: " + sql })
}

// prepareSQL is the context key of the statement a prepare traces.
type prepareSQL struct{}

// peer is one way of placing an order idempotently.
type peer struct {
	name  string
	table *orders.Table
	rt    *tracer
	// place places o with o.ID as the idempotency key and returns the
	// recorded receipt (the first call's, on a replay).
	place func(ctx context.Context, o *orders.Order) (*orders.Receipt, error)
}

// Names of the four peers.
const (
	dbosStep  = "DBOS workflow, RunAsStep"
	dbosTxn   = "DBOS workflow, RunAsTransaction"
	idemLease = "idemgen, pgstore lease"
	idemTx    = "idemgen, pgstore tx"
)

// env is a run's setup on one PostgreSQL server: a DBOS context on a pool
// of its own (its system schema, and a data source on the same pool, so
// that RunAsTransaction commits the business row and the checkpoint in one
// transaction), two idemgen executors on another pool (pgstore in lease and
// in transactional mode), and a business table per peer.
type env struct {
	idemPool, dbosPool *pgxpool.Pool
	dbos               dbos.Context
	schema             string // DBOS's system schema
	tables             []*orders.Table
	storeTables        []string // pgstore's tables
	peers              []*peer  // dbosStep, dbosTxn, idemLease, idemTx
}

// dbosExec adapts the dbos.Tx that RunAsTransaction hands its function to
// orders.Execer.
type dbosExec struct{ tx dbos.Tx }

func (x dbosExec) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	_, err := x.tx.Exec(ctx, sql, args...)
	return pgconn.CommandTag{}, err
}

// newEnv sets up the peers against dsn: every table and the DBOS schema get
// a random suffix, and close drops them. Each pool holds conns connections
// (DBOS's own default is 20; its LISTEN connection is one more).
func newEnv(ctx context.Context, dsn string, conns int32, logger *slog.Logger) (_ *env, err error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	e := &env{schema: "dbos_peer_" + suffix}
	defer func() {
		if err != nil {
			e.close(context.WithoutCancel(ctx))
		}
	}()
	idemRT, dbosRT := &tracer{}, &tracer{}
	if e.idemPool, err = newPool(ctx, dsn, conns, idemRT); err != nil {
		return nil, err
	}
	if e.dbosPool, err = newPool(ctx, dsn, conns+1, dbosRT); err != nil {
		return nil, err
	}
	table := func(name string) (*orders.Table, error) {
		t := orders.NewTable("dbos_peer_" + suffix + "_" + name)
		e.tables = append(e.tables, t)
		return t, t.Create(ctx, e.idemPool)
	}
	step, txn, lease, tx := new(orders.Table), new(orders.Table), new(orders.Table), new(orders.Table)
	for _, p := range []struct {
		t    **orders.Table
		name string
	}{{&step, "step"}, {&txn, "txn"}, {&lease, "lease"}, {&tx, "tx"}} {
		if *p.t, err = table(p.name); err != nil {
			return nil, err
		}
	}

	// DBOS, as its README and the transaction tutorial set it up.
	e.dbos, err = dbos.NewContext(ctx, dbos.Config{
		AppName:        "idemgen-bench",
		SystemDBPool:   e.dbosPool,
		DatabaseSchema: e.schema,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("dbos: %w", err)
	}
	ds, err := dbos.NewDataSource(e.dbos, e.dbosPool, dbos.WithDataSourceName("orders"))
	if err != nil {
		return nil, fmt.Errorf("dbos data source: %w", err)
	}
	pool := e.dbosPool
	stepWF := func(ctx dbos.Context, o orders.Order) (orders.Receipt, error) {
		return dbos.RunAsStep(ctx, func(ctx context.Context) (orders.Receipt, error) {
			r, err := step.Insert(ctx, pool, &o)
			if err != nil {
				return orders.Receipt{}, err
			}
			return *r, nil
		}, dbos.WithStepName("insert"))
	}
	txnWF := func(ctx dbos.Context, o orders.Order) (orders.Receipt, error) {
		return dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (orders.Receipt, error) {
			r, err := txn.Insert(ctx, dbosExec{tx}, &o)
			if err != nil {
				return orders.Receipt{}, err
			}
			return *r, nil
		}, dbos.WithStepName("insert"))
	}
	dbos.RegisterWorkflow(e.dbos, stepWF, dbos.WithWorkflowName("place-step"))
	dbos.RegisterWorkflow(e.dbos, txnWF, dbos.WithWorkflowName("place-txn"))
	if err := dbos.Launch(e.dbos); err != nil {
		return nil, fmt.Errorf("dbos launch: %w", err)
	}
	// The context of every measured DBOS call: DBOS's root with the mark.
	// It has no deadline on purpose: RunWorkflow turns a deadline into the
	// workflow's durable timeout.
	call := dbos.WithValue(e.dbos, markKey{}, true)
	run := func(wf dbos.Workflow[orders.Order, orders.Receipt]) func(context.Context, *orders.Order) (*orders.Receipt, error) {
		return func(_ context.Context, o *orders.Order) (*orders.Receipt, error) {
			h, err := dbos.RunWorkflow(call, wf, *o, dbos.WithWorkflowID(o.ID))
			if err != nil {
				return nil, err
			}
			r, err := h.GetResult()
			if err != nil {
				return nil, err
			}
			return &r, nil
		}
	}

	// idemgen: the generated wrapper of orders.Service.Place on pgstore.
	svc := func(t *orders.Table, st idem.Store) func(context.Context, *orders.Order) (*orders.Receipt, error) {
		w := orders.NewIdempotentService(&orders.Service{Pool: e.idemPool, Table: t}, idem.NewExecutor(st, idem.SingleTenant()))
		return func(ctx context.Context, o *orders.Order) (*orders.Receipt, error) {
			return w.Place(context.WithValue(ctx, markKey{}, true), o)
		}
	}
	leaseTable, txTable := "dbos_peer_"+suffix+"_idem_lease", "dbos_peer_"+suffix+"_idem_tx"
	e.storeTables = []string{leaseTable, txTable}
	leaseStore, txStore := pgstore.New(e.idemPool, pgstore.WithTable(leaseTable)), pgstore.NewTx(e.idemPool, pgstore.WithTable(txTable))
	if err := leaseStore.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := txStore.Migrate(ctx); err != nil {
		return nil, err
	}
	e.peers = []*peer{
		{name: dbosStep, table: step, rt: dbosRT, place: run(stepWF)},
		{name: dbosTxn, table: txn, rt: dbosRT, place: run(txnWF)},
		{name: idemLease, table: lease, rt: idemRT, place: svc(lease, leaseStore)},
		{name: idemTx, table: tx, rt: idemRT, place: svc(tx, txStore)},
	}
	return e, nil
}

func newPool(ctx context.Context, dsn string, conns int32, t *tracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.ConnConfig.Tracer = t
	return pgxpool.NewWithConfig(ctx, cfg)
}

// peer returns the peer named name.
func (e *env) peer(name string) *peer {
	for _, p := range e.peers {
		if p.name == name {
			return p
		}
	}
	panic("no peer " + name)
}

// close shuts DBOS down (which closes its pool) and drops every table and
// the DBOS schema.
func (e *env) close(ctx context.Context) error {
	var errs []error
	if e.dbos != nil {
		errs = append(errs, dbos.Shutdown(e.dbos, 10*time.Second))
	}
	if e.dbosPool != nil {
		e.dbosPool.Close()
	}
	if e.idemPool == nil {
		return errors.Join(errs...)
	}
	for _, t := range e.tables {
		errs = append(errs, t.Drop(ctx, e.idemPool))
	}
	for _, t := range e.storeTables {
		if _, err := e.idemPool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", t, err))
		}
	}
	if _, err := e.idemPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err != nil {
		errs = append(errs, fmt.Errorf("drop schema %s: %w", e.schema, err))
	}
	e.idemPool.Close()
	return errors.Join(errs...)
}

// check verifies the guarantee both peers claim, on everything placed so
// far: each order's row exists once, and the business work ran once per
// order (executions = rows = distinct order IDs).
func (e *env) check(ctx context.Context) ([]orders.Count, error) {
	var counts []orders.Count
	var errs []error
	for _, p := range e.peers {
		c, err := p.table.Check(ctx, e.idemPool)
		if err != nil {
			return nil, err
		}
		if c.Rows != c.Keys || c.Runs != c.Rows {
			errs = append(errs, fmt.Errorf("%s: %d rows for %d orders after %d executions: an order ran twice", p.name, c.Rows, c.Keys, c.Runs))
		}
		counts = append(counts, c)
	}
	return counts, errors.Join(errs...)
}

// newOrder returns an order with a fresh ID (a UUID, as DBOS recommends for
// idempotency keys).
func newOrder() *orders.Order {
	return &orders.Order{ID: uuid.NewString(), Customer: "c-42", Amount: 4250, Currency: "EUR"}
}

// same reports whether r is o's receipt.
func same(r *orders.Receipt, o *orders.Order) error {
	if r == nil || r.OrderID != o.ID || r.Amount != o.Amount || r.Customer != o.Customer || r.Currency != o.Currency || r.Status != "placed" {
		return fmt.Errorf("order %s: receipt %+v is not its own", o.ID, r)
	}
	return nil
}
