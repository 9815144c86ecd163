// Package billing is an annotated service whose generated wrapper is up to
// date.
package billing

import (
	"context"
	"errors"
)

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

// Order is charged by Pay.
type Order struct {
	ID     string
	Amount int64
}

// Service charges orders.
type Service struct{ charged int64 }

// ErrDeclined is final.
var ErrDeclined = errors.New("declined")

// Pay charges order once per order.ID.
//
//idem:key=order.ID ttl=1h final=ErrDeclined
func (s *Service) Pay(ctx context.Context, order *Order) (int64, error) {
	s.charged += order.Amount
	return s.charged, nil
}

// Balance is not annotated.
func (s *Service) Balance() int64 { return s.charged }
