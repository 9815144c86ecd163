// Package orders is the small service that internal/benchcmp measures: one
// annotated method, Place, whose generated wrapper (idem_gen.go) runs on every
// store, and the same business work exposed for the hand-written floors.
package orders

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Order is the request.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Receipt is the result that is stored and replayed.
type Receipt struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// ErrRejected is a business outcome.
var ErrRejected = errors.New("orders: rejected")

// Execer is what the business INSERT needs: a pool, a connection or a
// transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// InsertSQL is the business statement of Place when the service has a pool.
const InsertSQL = `INSERT INTO bench_orders (id, customer, amount, currency) VALUES ($1, $2, $3, $4)`

// Schema creates the business table.
const Schema = `CREATE TABLE IF NOT EXISTS bench_orders (
	id text PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL, currency text NOT NULL)`

// Service places orders; with a pool (PostgreSQL) or a DB (MySQL), each
// order is one INSERT.
type Service struct {
	Pool *pgxpool.Pool
	DB   *sql.DB
}

// SQLExecer runs a statement on a database/sql database or transaction.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// MySQLInsertSQL is InsertSQL for MySQL.
const MySQLInsertSQL = `INSERT INTO bench_orders (id, customer, amount, currency) VALUES (?, ?, ?, ?)`

// MySQLSchema is Schema for MySQL.
const MySQLSchema = `CREATE TABLE IF NOT EXISTS bench_orders (
	id VARCHAR(191) NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL,
	currency VARCHAR(8) NOT NULL) ENGINE = InnoDB`

// PlaceSQL is Place's business work on q, a MySQL database or transaction.
func (s *Service) PlaceSQL(ctx context.Context, q SQLExecer, order *Order, op string) (*Receipt, error) {
	if order.Amount < 0 {
		return nil, ErrRejected
	}
	if _, err := q.ExecContext(ctx, MySQLInsertSQL, order.ID, order.Customer, order.Amount, order.Currency); err != nil {
		return nil, err
	}
	return &Receipt{OrderID: order.ID, Customer: order.Customer, Amount: order.Amount,
		Currency: order.Currency, Status: "placed"}, nil
}

// Place places an order. A retry with the same order ID and op replays the
// receipt.
//
//idem:key=order.ID+op ttl=5m lease=30s
//idem:final=ErrRejected
func (s *Service) Place(ctx context.Context, order *Order, op string) (*Receipt, error) {
	if tx, ok := mysqlstore.TxFrom(ctx); ok {
		return s.PlaceSQL(ctx, tx, order, op)
	} else if s.DB != nil {
		return s.PlaceSQL(ctx, s.DB, order, op)
	}
	var q Execer
	if tx, ok := pgstore.TxFrom(ctx); ok {
		q = tx
	} else if s.Pool != nil {
		q = s.Pool
	}
	return s.PlaceWith(ctx, q, order, op)
}

// PlaceWith is Place's business work on q (nil: in memory only); the floors
// call it inside their own transactions.
func (s *Service) PlaceWith(ctx context.Context, q Execer, order *Order, op string) (*Receipt, error) {
	if order.Amount < 0 {
		return nil, ErrRejected
	}
	if q != nil {
		if _, err := q.Exec(ctx, InsertSQL, order.ID, order.Customer, order.Amount, order.Currency); err != nil {
			return nil, err
		}
	}
	return &Receipt{OrderID: order.ID, Customer: order.Customer, Amount: order.Amount,
		Currency: order.Currency, Status: "placed"}, nil
}
