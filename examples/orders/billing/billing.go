// Package billing is the example service of idemgen: an order payment
// service whose money-moving methods are made idempotent by annotation.
//
// Run `go generate` here to rewrite idem_gen.go from the annotations.
package billing

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

import (
	"context"
	"errors"
	"fmt"
)

// Business (final) errors: stored and replayed to retries, never retried.
var (
	// ErrInsufficientFunds: the customer's balance does not cover the amount.
	ErrInsufficientFunds = errors.New("insufficient funds")
	// ErrOrderClosed: the order no longer accepts payments or refunds.
	ErrOrderClosed = errors.New("order closed")
)

// ErrGatewayTimeout is a transient failure of the payment gateway: the key is
// released and a retry executes again.
var ErrGatewayTimeout = errors.New("payment gateway timeout")

// Order is an order to pay.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"` // in cents
}

// Receipt is the result of a payment.
type Receipt struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"`
	Balance   int64  `json:"balance"` // the customer's balance after the payment
}

// RefundRequest asks to refund part of a payment.
type RefundRequest struct {
	CustomerID string `json:"customer_id"`
	OrderID    string `json:"order_id"`
	RefundNo   int    `json:"refund_no"`
	Amount     int64  `json:"amount"`
}

// Refund is the result of a refund.
type Refund struct {
	RefundID string `json:"refund_id"`
	Amount   int64  `json:"amount"`
}

// MessageID identifies a queue message; the queue redelivers a message with
// the same ID (at-least-once delivery).
type MessageID string

// String returns the ID.
func (m MessageID) String() string { return string(m) }

// ShipmentMessage tells billing that an order shipped; it captures the
// order's loyalty points.
type ShipmentMessage struct {
	ID      MessageID `json:"id"`
	OrderID string    `json:"order_id"`
	Points  int       `json:"points"`
}

// Ledger is where money moves. Every call of Debit or Credit is one real
// movement of money: the demo counts them.
type Ledger interface {
	// Debit takes amount from customer for order and returns the payment ID
	// and the new balance.
	Debit(ctx context.Context, customer, order string, amount int64) (paymentID string, balance int64, err error)
	// Credit gives amount back to customer for order.
	Credit(ctx context.Context, customer, order string, amount int64) (refundID string, err error)
	// AddPoints adds loyalty points to an order.
	AddPoints(ctx context.Context, order string, points int) error
}

// Gateway authorizes a payment with the card network. It may fail
// transiently (ErrGatewayTimeout).
type Gateway interface {
	Authorize(ctx context.Context, order *Order) error
}

// Service is the order payment service.
//
//idem:defaults lease=1s
type Service struct {
	Ledger  Ledger
	Gateway Gateway
}

// Pay charges the order's amount to its customer. A double click or a client
// retry with the same order and op replays the first receipt.
//
//idem:key=order.ID+op ttl=155s inflight=wait:3s
//idem:final=ErrInsufficientFunds|ErrOrderClosed
func (s *Service) Pay(ctx context.Context, order *Order, op string) (*Receipt, error) {
	if err := s.Gateway.Authorize(ctx, order); err != nil {
		return nil, fmt.Errorf("pay %s: %w", order.ID, err)
	}
	id, balance, err := s.Ledger.Debit(ctx, order.Customer, order.ID, order.Amount)
	if err != nil {
		return nil, fmt.Errorf("pay %s: %w", order.ID, err)
	}
	return &Receipt{PaymentID: id, OrderID: order.ID, Amount: order.Amount, Balance: balance}, nil
}

// Refund gives part of a payment back. Its TTL is derived from the retry
// budget of the callers: 2×(2s+500ms)+120s+30s = 155s. Its lease covers one
// attempt's timeout (the type's 1s would lapse under a 2s attempt, and a
// retry would take the call over and refund twice).
//
//idem:key=req.CustomerID+"refund"+req.RefundNo lease=5s
//idem:retries=2 timeout=2s backoff=500ms downstream=120s margin=30s
//idem:final=ErrInsufficientFunds|ErrOrderClosed
func (s *Service) Refund(ctx context.Context, req RefundRequest) (*Refund, error) {
	id, err := s.Ledger.Credit(ctx, req.CustomerID, req.OrderID, req.Amount)
	if err != nil {
		return nil, fmt.Errorf("refund %s #%d: %w", req.OrderID, req.RefundNo, err)
	}
	return &Refund{RefundID: id, Amount: req.Amount}, nil
}

// HandleShipment consumes a shipment message. The queue delivers at least
// once; the message ID makes a redelivery a replay.
//
//idem:key=msg.ID ttl=7d
func (s *Service) HandleShipment(ctx context.Context, msg ShipmentMessage) error {
	return s.Ledger.AddPoints(ctx, msg.OrderID, msg.Points)
}

// Ping is not annotated: the wrapper passes it through unchanged.
func (s *Service) Ping(context.Context) error { return nil }
