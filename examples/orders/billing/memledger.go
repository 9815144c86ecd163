package billing

import (
	"context"
	"fmt"
	"sync"
)

// MemLedger is an in-memory Ledger that counts every movement of money, per
// order.
type MemLedger struct {
	mu       sync.Mutex
	balances map[string]int64
	moves    map[string]int
	points   map[string]int
	seq      int
}

// NewMemLedger returns a ledger with the given opening balances.
func NewMemLedger(balances map[string]int64) *MemLedger {
	l := &MemLedger{balances: map[string]int64{}, moves: map[string]int{}, points: map[string]int{}}
	for c, b := range balances {
		l.balances[c] = b
	}
	return l
}

// Debit implements Ledger.
func (l *MemLedger) Debit(_ context.Context, customer, order string, amount int64) (string, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.balances[customer] < amount {
		return "", l.balances[customer], ErrInsufficientFunds
	}
	l.balances[customer] -= amount
	l.moves[order]++
	l.seq++
	return fmt.Sprintf("pay_%04d", l.seq), l.balances[customer], nil
}

// Credit implements Ledger.
func (l *MemLedger) Credit(_ context.Context, customer, order string, amount int64) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.balances[customer] += amount
	l.moves[order]++
	l.seq++
	return fmt.Sprintf("ref_%04d", l.seq), nil
}

// AddPoints implements Ledger.
func (l *MemLedger) AddPoints(_ context.Context, order string, points int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.points[order] += points
	return nil
}

// Moves returns how many times money moved for order.
func (l *MemLedger) Moves(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.moves[order]
}

// Points returns the loyalty points of order.
func (l *MemLedger) Points(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.points[order]
}

// Balance returns customer's balance.
func (l *MemLedger) Balance(customer string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[customer]
}
