// Package stormsvc is the service the duplicate storm (internal/stress)
// drives through its generated wrapper (idem_gen.go, from `make generate`):
// a payment (Pay, keyed by order and op, with final errors) and a message
// handler (HandleShipment, keyed by message ID), the two shapes of an
// idempotent method. The harness owns it, so that the example services can
// change without changing what the storm checks; the harness supplies the
// Ledger and the Gateway, where it counts executions and injects faults.
package stormsvc

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

import (
	"context"
	"errors"
	"fmt"
)

// Final (business) errors of Pay: stored and replayed.
var (
	ErrInsufficientFunds = errors.New("insufficient funds")
	ErrOrderClosed       = errors.New("order closed")
)

// ErrGatewayTimeout is a transient failure of the gateway: the key is
// released and a retry runs Pay again.
var ErrGatewayTimeout = errors.New("payment gateway timeout")

// Order is a payment request.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// Receipt is the result of a payment.
type Receipt struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"`
	Balance   int64  `json:"balance"`
}

// ShipmentMessage is a message delivered at least once; its ID is the key.
type ShipmentMessage struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	Points  int    `json:"points"`
}

// Ledger moves the money and the points: the side effects whose executions
// the harness counts.
type Ledger interface {
	Debit(ctx context.Context, customer, order string, amount int64) (paymentID string, balance int64, err error)
	AddPoints(ctx context.Context, order string, points int) error
}

// Gateway authorizes a payment before the ledger moves the money.
type Gateway interface {
	Authorize(ctx context.Context, order *Order) error
}

// Service is the storm's service.
//
//idem:defaults lease=30s
type Service struct {
	Ledger  Ledger
	Gateway Gateway
}

// Pay authorizes the order, then debits its amount from its customer.
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

// HandleShipment credits the message's points to its order.
//
//idem:key=msg.ID ttl=7d
func (s *Service) HandleShipment(ctx context.Context, msg ShipmentMessage) error {
	if err := s.Ledger.AddPoints(ctx, msg.OrderID, msg.Points); err != nil {
		return fmt.Errorf("shipment %s: %w", msg.ID, err)
	}
	return nil
}
