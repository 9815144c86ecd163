package stress

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"sync"
	"time"

	"github.com/idemgen/idemgen/internal/stress/stormsvc"
)

// Ledger is the independent execution counter: a stormsvc.Ledger that
// counts every Debit (one real execution of Pay's body past the gateway) and
// every AddPoints (one execution of HandleShipment) per order, whatever the
// outcome, and keeps the customers' balances.
type Ledger struct {
	// Write, when set (transactional mode), records the payment in the
	// business table through the call's transaction; its error fails the
	// Debit (a *DBError), which rolls the call back.
	Write func(ctx context.Context, order, paymentID string) error
	// After runs after a Debit moved the money, with the order and the
	// Debit's ordinal for that order (1 for the first); it may stall.
	After func(order string, n int)

	mu       sync.Mutex
	balances map[string]int64
	seq      int // payments made
	writes   map[string]int
	debits   map[string]int
	points   map[string]int
}

// NewLedger returns a counting ledger with the given opening balances.
func NewLedger(balances map[string]int64) *Ledger {
	return &Ledger{balances: maps.Clone(balances), debits: map[string]int{}, writes: map[string]int{}, points: map[string]int{}}
}

// debit moves the money: ErrInsufficientFunds when the customer's balance
// is short.
func (l *Ledger) debit(customer string, amount int64) (string, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.balances[customer] < amount {
		return "", l.balances[customer], stormsvc.ErrInsufficientFunds
	}
	l.balances[customer] -= amount
	l.seq++
	return fmt.Sprintf("pay_%04d", l.seq), l.balances[customer], nil
}

// Debit implements stormsvc.Ledger.
func (l *Ledger) Debit(ctx context.Context, customer, order string, amount int64) (string, int64, error) {
	l.mu.Lock()
	l.debits[order]++
	n := l.debits[order]
	l.mu.Unlock()
	id, bal, err := l.debit(customer, amount)
	if err == nil && l.Write != nil {
		if werr := l.Write(ctx, order, id); werr != nil {
			return "", 0, &DBError{Err: werr}
		}
		l.mu.Lock()
		l.writes[order]++
		l.mu.Unlock()
	}
	if l.After != nil {
		l.After(order, n)
	}
	return id, bal, err
}

// AddPoints implements stormsvc.Ledger: it counts one execution of
// HandleShipment for order (the points themselves are not checked).
func (l *Ledger) AddPoints(_ context.Context, order string, _ int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.points[order]++
	return nil
}

// DBError is a failed write of the business table (transactional mode): the
// call's transaction is lost, nothing of it commits.
type DBError struct{ Err error }

func (e *DBError) Error() string { return "business write: " + e.Err.Error() }
func (e *DBError) Unwrap() error { return e.Err }

// Executions returns how many times Pay's body debited order.
func (l *Ledger) Executions(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.debits[order]
}

// Writes returns how many business writes for order succeeded (Write),
// committed or not.
func (l *Ledger) Writes(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes[order]
}

// Shipments returns how many times HandleShipment's body ran for order.
func (l *Ledger) Shipments(order string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.points[order]
}

// Gateway is a stormsvc.Gateway with injected faults: a per-order hook that
// may stall a call or fail it (transiently with stormsvc.ErrGatewayTimeout,
// or finally).
type Gateway struct {
	// Hook runs first, with the order and the ordinal of this Authorize for
	// it; a non-nil error is returned as is (after the stall).
	Hook func(order string, n int) (stall time.Duration, err error)

	mu    sync.Mutex
	calls map[string]int
}

// Authorize implements stormsvc.Gateway.
func (g *Gateway) Authorize(_ context.Context, o *stormsvc.Order) error {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]int{}
	}
	g.calls[o.ID]++
	n := g.calls[o.ID]
	g.mu.Unlock()
	if g.Hook != nil {
		d, err := g.Hook(o.ID, n)
		if d > 0 {
			// A stall ignores the caller's context on purpose: it is a
			// worker stuck (GC pause, swapped out, a hung socket) while
			// its lease runs out.
			time.Sleep(d)
		}
		return err
	}
	return nil
}

// frac is a deterministic number in [0, 1) for (seed, s, n).
func frac(seed uint64, s string, n int) float64 {
	h := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
		b[8+i] = byte(uint64(n) >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(s))
	// FNV leaves the high bits of a short suffix poorly mixed: finish
	// with splitmix64's mixer.
	x := h.Sum64()
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
