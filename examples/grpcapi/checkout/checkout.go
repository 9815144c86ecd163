// Package checkout is service A of the example: it places an order and
// charges it through service B, the payments service, over gRPC. PlaceOrder
// is annotated, so the generated wrapper runs it once per order ID; its call
// to B goes through idemgrpc's client interceptor, which derives B's key
// from the order's (idem.Derive), so a retry of the order reaches B with the
// same key and B charges once.
package checkout

//go:generate go tool idemgen

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ChargeMethod is the full name of service B's unary method.
const ChargeMethod = "/payments.Payments/Charge"

// Order is what a client asks checkout to place.
type Order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Placed is checkout's answer.
type Placed struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
}

// Service is checkout. Reserve is its own step after the charge (stock
// reservation); an error from it releases the order's key.
type Service struct {
	Payments grpc.ClientConnInterface
	Reserve  func(ctx context.Context, order Order) error
}

// PlaceOrder charges the order through the payments service, then reserves
// its stock.
//
//idem:key=order.ID ttl=24h
func (s *Service) PlaceOrder(ctx context.Context, order Order) (*Placed, error) {
	req, err := structpb.NewStruct(map[string]any{"order": order.ID, "amount": float64(order.Amount)})
	if err != nil {
		return nil, err
	}
	charge := new(wrapperspb.StringValue)
	if err := s.Payments.Invoke(ctx, ChargeMethod, req, charge); err != nil {
		return nil, fmt.Errorf("charge %s: %w", order.ID, err)
	}
	if s.Reserve != nil {
		if err := s.Reserve(ctx, order); err != nil {
			return nil, fmt.Errorf("reserve %s: %w", order.ID, err)
		}
	}
	return &Placed{OrderID: order.ID, ChargeID: charge.GetValue()}, nil
}
