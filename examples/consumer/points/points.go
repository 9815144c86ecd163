// Package points is the consumer of the example: it credits loyalty points
// when a shipment message arrives from the broker. The broker delivers at
// least once, so the handler is annotated: a redelivery of the same message
// (the same message ID) replays the first outcome instead of crediting the
// points again.
package points

//go:generate go tool idemgen

import (
	"context"
	"fmt"
	"sync"
)

// Message is a shipment message as published on the broker.
type Message struct {
	// ID identifies the message: the producer sets it once, and every
	// redelivery, retry of the publish or redrive carries the same ID.
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	Points  int    `json:"points"`
}

// Ledger is where the effect happens: it counts, per order, how many times
// points were credited (the example's "side effects per message").
type Ledger struct {
	mu      sync.Mutex
	credits map[string]int
	points  map[string]int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{credits: map[string]int{}, points: map[string]int{}}
}

// Credit adds points to an order: the side effect.
func (l *Ledger) Credit(order string, points int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.credits[order]++
	l.points[order] += points
}

// Credits returns how many times order was credited.
func (l *Ledger) Credits(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.credits[order]
}

// Points returns the points credited to order.
func (l *Ledger) Points(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.points[order]
}

// Service handles shipment messages.
type Service struct {
	Ledger *Ledger
}

// HandleShipment credits the order's points. The key is the message ID: a
// redelivered message is the same message, so its outcome is replayed. The
// TTL is the broker's redelivery budget: up to 4 redeliveries (MaxDeliver 5)
// each after an AckWait of 30s and a Nak delay of 10s, then a dead-letter
// redrive up to 72h later, with a day of margin:
// 4×(30s+10s)+72h+24h = 96h2m40s.
//
//idem:key=msg.ID retries=4 timeout=30s backoff=10s downstream=72h margin=24h
func (s *Service) HandleShipment(ctx context.Context, msg Message) error {
	if msg.Points <= 0 {
		return fmt.Errorf("shipment %s: points must be positive, got %d", msg.ID, msg.Points)
	}
	s.Ledger.Credit(msg.OrderID, msg.Points)
	return nil
}
