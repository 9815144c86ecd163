// Package shopdb is written in the shape sqlc generates (db.go, models.go,
// query.sql.go) for the queries in its comments, by hand, so that the
// example needs no code generator besides idemgen: DBTX, New, WithTx and
// one method per query.
package shopdb

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the example's table.
const Schema = `CREATE TABLE IF NOT EXISTS shop_orders (
    id        bigserial PRIMARY KEY,
    cart_id   text   NOT NULL,
    customer  text   NOT NULL,
    amount    bigint NOT NULL,
    status    text   NOT NULL DEFAULT 'placed'
)`

// DBTX is what the queries run on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries { return &Queries{db: db} }

// Queries runs the example's queries.
type Queries struct{ db DBTX }

// WithTx returns the queries on tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries { return &Queries{db: tx} }

// Order is a row of shop_orders.
type Order struct {
	ID       int64
	CartID   string
	Customer string
	Amount   int64
	Status   string
}

const createOrder = `-- name: CreateOrder :one
INSERT INTO shop_orders (cart_id, customer, amount) VALUES ($1, $2, $3)
RETURNING id, cart_id, customer, amount, status`

// CreateOrderParams are CreateOrder's parameters.
type CreateOrderParams struct {
	CartID   string
	Customer string
	Amount   int64
}

// CreateOrder inserts an order.
func (q *Queries) CreateOrder(ctx context.Context, arg CreateOrderParams) (Order, error) {
	row := q.db.QueryRow(ctx, createOrder, arg.CartID, arg.Customer, arg.Amount)
	var i Order
	err := row.Scan(&i.ID, &i.CartID, &i.Customer, &i.Amount, &i.Status)
	return i, err
}

const getOrderForUpdate = `-- name: GetOrderForUpdate :one
SELECT id, cart_id, customer, amount, status FROM shop_orders WHERE id = $1 FOR UPDATE`

// GetOrderForUpdate reads an order and locks its row.
func (q *Queries) GetOrderForUpdate(ctx context.Context, id int64) (Order, error) {
	row := q.db.QueryRow(ctx, getOrderForUpdate, id)
	var i Order
	err := row.Scan(&i.ID, &i.CartID, &i.Customer, &i.Amount, &i.Status)
	return i, err
}

const setOrderStatus = `-- name: SetOrderStatus :exec
UPDATE shop_orders SET status = $2 WHERE id = $1`

// SetOrderStatusParams are SetOrderStatus's parameters.
type SetOrderStatusParams struct {
	ID     int64
	Status string
}

// SetOrderStatus changes an order's status.
func (q *Queries) SetOrderStatus(ctx context.Context, arg SetOrderStatusParams) error {
	_, err := q.db.Exec(ctx, setOrderStatus, arg.ID, arg.Status)
	return err
}
