// Package orders is the operation that cmd/dbos compares: placing an order
// inserts one row into a business table. Its annotated method Place runs
// through the generated idemgen wrapper (idem_gen.go) on pgstore; the DBOS
// peer runs the same Insert as the step of a workflow.
package orders

//go:generate go tool idemgen

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Order is the request. Its ID is the caller's idempotency key: the workflow
// ID of the DBOS peer, the key of Place.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Receipt is the outcome that both peers record and return to every replay.
type Receipt struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// Execer is what the business INSERT needs: a pool or a transaction (pgx's,
// or the dbos.Tx a DBOS transaction hands its function, through an adapter).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Table is a business table: one row per placed order. It has no unique
// constraint on the order ID on purpose: a second execution of an order
// shows as a second row (Table.Check counts them) instead of failing.
type Table struct {
	name   string // quoted
	insert string
	// Runs counts the executions of Insert on this table.
	Runs atomic.Int64
}

// NewTable returns the business table named name (not created: see Create).
func NewTable(name string) *Table {
	q := pgx.Identifier{name}.Sanitize()
	return &Table{name: q, insert: "INSERT INTO " + q + " (id, customer, amount, currency) VALUES ($1, $2, $3, $4)"}
}

// Create creates the table and its (non-unique) index on id if they do not
// exist.
func (t *Table) Create(ctx context.Context, pool *pgxpool.Pool) error {
	idx := pgx.Identifier{t.name[1:len(t.name)-1] + "_id"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+t.name+
		" (id text NOT NULL, customer text NOT NULL, amount bigint NOT NULL, currency text NOT NULL);"+
		" CREATE INDEX IF NOT EXISTS "+idx+" ON "+t.name+" (id)")
	if err != nil {
		return fmt.Errorf("create %s: %w", t.name, err)
	}
	return nil
}

// Drop drops the table.
func (t *Table) Drop(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+t.name); err != nil {
		return fmt.Errorf("drop %s: %w", t.name, err)
	}
	return nil
}

// Insert is the business work of placing o: one INSERT on q.
func (t *Table) Insert(ctx context.Context, q Execer, o *Order) (*Receipt, error) {
	t.Runs.Add(1)
	if _, err := q.Exec(ctx, t.insert, o.ID, o.Customer, o.Amount, o.Currency); err != nil {
		return nil, fmt.Errorf("place %s: %w", o.ID, err)
	}
	return &Receipt{OrderID: o.ID, Customer: o.Customer, Amount: o.Amount, Currency: o.Currency, Status: "placed"}, nil
}

// Count is what Check reads: rows, distinct order IDs, executions.
type Count struct {
	Rows, Keys, Runs int64
}

// Check counts the table's rows and distinct order IDs, with the executions
// of Insert so far.
func (t *Table) Check(ctx context.Context, pool *pgxpool.Pool) (Count, error) {
	c := Count{Runs: t.Runs.Load()}
	err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM "+t.name).Scan(&c.Rows, &c.Keys)
	if err != nil {
		return c, fmt.Errorf("count %s: %w", t.name, err)
	}
	return c, nil
}

// Service places orders into its table, on its pool or, when it runs in
// pgstore's transactional mode, in the transaction that also holds the
// idempotency record.
type Service struct {
	Pool  *pgxpool.Pool
	Table *Table
}

// Place places an order. The generated wrapper runs it once per order ID and
// replays its receipt to every retry for 24 hours; a duplicate that arrives
// while the first call runs waits for its receipt (as a DBOS workflow's
// duplicate does).
//
//idem:key=order.ID ttl=24h lease=30s
//idem:inflight=wait:10s
func (s *Service) Place(ctx context.Context, order *Order) (*Receipt, error) {
	var q Execer = s.Pool
	if tx, ok := pgstore.TxFrom(ctx); ok {
		q = tx
	}
	return s.Table.Insert(ctx, q, order)
}
