// Package orders is the business layer of the shop example: an order
// service whose methods are made idempotent by annotation (idem_gen.go),
// run in transactional mode (pgstore.NewTx) and write through sqlc-style
// queries in a savepoint of the claim's transaction (pgstore.BeginTx).
package orders

//go:generate go tool idemgen

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/shop/shopdb"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Errors of the service.
var (
	// ErrOrderNotFound: no such order. It is not final: the order may be
	// created by a request still in flight, so a retry runs again.
	ErrOrderNotFound = errors.New("orders: order not found")
	// ErrAlreadyCancelled: the order was cancelled before (final: stored
	// and replayed).
	ErrAlreadyCancelled = errors.New("orders: order already cancelled")
	// ErrAmount: the amount is not positive (final).
	ErrAmount = errors.New("orders: the amount must be positive")
)

// PlaceRequest is PlaceOrder's payload.
type PlaceRequest struct {
	CartID   string `json:"cart_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// Service places and cancels orders.
//
//idem:defaults ttl=24h inflight=wait:5s
type Service struct {
	pool *pgxpool.Pool
	q    *shopdb.Queries
}

// NewService returns the service on pool.
func NewService(pool *pgxpool.Pool) *Service {
	return &Service{pool: pool, q: shopdb.New(pool)}
}

// PlaceOrder places the order of a cart: one order per cart, whichever
// client or Idempotency-Key asks (the business key), and a cart ordered
// again with another content is refused (idem.ErrPayloadMismatch).
//
//idem:key=req.CartID final=ErrAmount
func (s *Service) PlaceOrder(ctx context.Context, req PlaceRequest) (shopdb.Order, error) {
	if req.Amount <= 0 {
		return shopdb.Order{}, ErrAmount
	}
	tx, err := pgstore.BeginTx(ctx, s.pool) // the claim's transaction, or one of its own
	if err != nil {
		return shopdb.Order{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // nothing after Commit
	o, err := s.q.WithTx(tx).CreateOrder(ctx, shopdb.CreateOrderParams{CartID: req.CartID, Customer: req.Customer, Amount: req.Amount})
	if err != nil {
		return shopdb.Order{}, fmt.Errorf("place order of cart %s: %w", req.CartID, err)
	}
	return o, tx.Commit(ctx)
}

// TipRequest is Tip's payload.
type TipRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// Tip records a tip: a create with no natural business key, keyed by the
// client's Idempotency-Key (clientkey) instead of a ClientRef field copied
// from the header by hand. Called outside a keyed request it fails with
// idem.ErrMissingKey.
//
//idem:key=clientkey final=ErrAmount
func (s *Service) Tip(ctx context.Context, req TipRequest) (shopdb.Order, error) {
	if req.Amount <= 0 {
		return shopdb.Order{}, ErrAmount
	}
	tx, err := pgstore.BeginTx(ctx, s.pool)
	if err != nil {
		return shopdb.Order{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	o, err := s.q.WithTx(tx).CreateOrder(ctx, shopdb.CreateOrderParams{CartID: "tip", Customer: req.Customer, Amount: req.Amount})
	if err != nil {
		return shopdb.Order{}, fmt.Errorf("tip: %w", err)
	}
	return o, tx.Commit(ctx)
}

// CancelOrder cancels an order once; cancelling it again is
// ErrAlreadyCancelled, replayed to every retry.
//
//idem:key=id final=ErrAlreadyCancelled
func (s *Service) CancelOrder(ctx context.Context, id int64) (shopdb.Order, error) {
	tx, err := pgstore.BeginTx(ctx, s.pool)
	if err != nil {
		return shopdb.Order{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := s.q.WithTx(tx)
	o, err := q.GetOrderForUpdate(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return shopdb.Order{}, ErrOrderNotFound
	}
	if err != nil {
		return shopdb.Order{}, err
	}
	if o.Status == "cancelled" {
		return shopdb.Order{}, ErrAlreadyCancelled
	}
	if err := q.SetOrderStatus(ctx, shopdb.SetOrderStatusParams{ID: id, Status: "cancelled"}); err != nil {
		return shopdb.Order{}, err
	}
	o.Status = "cancelled"
	return o, tx.Commit(ctx)
}
