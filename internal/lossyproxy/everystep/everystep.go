// Package everystep loses the reply of each request of an idempotent call
// in turn, and checks that the call still keeps its guarantees.
//
// A store's error paths are reached when a connection breaks, and a
// connection can break after any request: the claim, a statement of the
// method, the outcome, the COMMIT, the question that resolves a lost
// COMMIT, a rollback, a reconnection's handshake. Hand-written tests pick
// one of those; Run takes them all. It counts the requests a clean call
// sends through a lossyproxy.Proxy, then, for each n, runs the call again
// on a fresh store whose proxy loses the reply to the n-th request (the
// server applies it, the client's connection breaks), for each way the
// method can end (success, final error, transient error). Whatever was
// lost:
//
//   - the store raises no panic;
//   - retries settle on one answer, the answer every later call replays
//     without running the method;
//   - a success's business write is committed once; a final error's is
//     never committed in transactional mode (its writes are discarded);
//   - the method runs again only after a call that failed: a caller that
//     was told it succeeded never sees its call run a second time.
package everystep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Store is the store under test, and the business table its method writes.
type Store struct {
	// Upstream is the server's address (host:port).
	Upstream string
	// Open returns a new store (a new pool of connections) whose
	// connections go to addr, the proxy's address, on the same table
	// every time. It is called once per lost reply.
	Open func(t *testing.T, addr string) idem.Store
	// Write writes the method's business row for id: in transactional
	// mode in the call's transaction (ctx is the method's context),
	// otherwise on its own.
	Write func(ctx context.Context, id string) error
	// Rows counts the committed business rows of id.
	Rows func(t *testing.T, id string) int
	// Layers runs every ending a second time with two idempotent calls
	// stacked (subtests layered/ending/lost/n): the outer call's method
	// makes the inner call, whose method writes the business row, as an
	// edge layer over a wrapped method, or a wrapped method calling
	// another, do. A store that joins the outer transaction
	// (idem.NestingTxStore) commits both records with the row; another
	// commits the inner call first. Either way the guarantees hold for the
	// outer call, and the inner key replays its own answer.
	Layers bool
}

var errDeclined = errors.New("card declined")

var errReset = errors.New("connection reset by the payment provider")

// ending is one way the first call's method ends.
type ending struct {
	name string
	// first is the first call's method result; retry the method of the
	// calls after a failed first call.
	first, retry func() (string, error)
}

var endings = []ending{
	{"success", ok("receipt"), ok("receipt")},
	{"final-error", declined, declined},
	{"transient-error", func() (string, error) { return "", errReset }, ok("second")},
}

func ok(v string) func() (string, error) { return func() (string, error) { return v, nil } }

func declined() (string, error) { return "", fmt.Errorf("charge: %w", errDeclined) }

// Run loses each request's reply of a call through s in turn, for each
// way the method can end, in subtests named ending/lost/n.
func Run(t *testing.T, s Store) {
	run(t, s, false)
	if s.Layers {
		t.Run("layered", func(t *testing.T) { run(t, s, true) })
	}
}

func run(t *testing.T, s Store, layered bool) {
	for _, end := range endings {
		t.Run(end.name, func(t *testing.T) {
			n := requests(t, s, end, layered)
			var dropped atomic.Int32
			// The losses are independent (a proxy, a store and a key
			// each): they run in parallel, within -test.parallel, in a
			// group that ends before the count is checked.
			t.Run("lost", func(t *testing.T) {
				for i := 1; i <= n; i++ {
					t.Run(strconv.Itoa(i), func(t *testing.T) {
						t.Parallel()
						if lose(t, s, end, i, layered) {
							dropped.Add(1)
						}
					})
				}
			})
			// The count is of a clean call on a fresh store, and every
			// lossy call runs on a fresh store too: they send the same
			// requests, so every reply but those of work done in the
			// background is lost once.
			if dropped := int(dropped.Load()); dropped < (n+1)/2 {
				t.Errorf("only %d of %d requests lost their reply: the count is not of the lossy calls' requests", dropped, n)
			}
			t.Logf("%d requests, %d replies lost", n, dropped.Load())
		})
	}
}

// requests counts the requests of one clean call.
func requests(t *testing.T, s Store, end ending, layered bool) int {
	p := lossyproxy.New(t, s.Upstream)
	var n atomic.Int32
	p.DropNextReplyTo(func([]byte) bool { n.Add(1); return false })
	c := newCaller(t, s, p, layered)
	if _, err := c.call(end.first); err != nil && !errors.Is(err, errDeclined) && !errors.Is(err, errReset) {
		t.Fatalf("clean call: %v", err)
	}
	if got := c.runs.Load(); got != 1 {
		t.Fatalf("clean call ran its method %d times", got)
	}
	return int(n.Load())
}

// caller makes the calls of one key.
type caller struct {
	t  *testing.T
	s  Store
	ex *idem.Executor
	m  idem.Method
	id string
	tx bool // the store is transactional
	// layered: the method of m makes the call of inner, whose method
	// writes the row (Store.Layers).
	layered bool
	inner   idem.Method
	runs    atomic.Int32 // of the method that writes the row
}

func newCaller(t *testing.T, s Store, p *lossyproxy.Proxy, layered bool) *caller {
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &caller{t: t, s: s, id: "everystep-" + hex.EncodeToString(b[:]), layered: layered}
	store := s.Open(t, p.Addr())
	_, c.tx = store.(idem.TxStore)
	c.ex = idem.NewExecutor(store, idem.SingleTenant())
	c.m = idem.Method{Op: "everystep.Charge", TTL: time.Hour, Lease: 5 * time.Second,
		Final: []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}}
	c.inner = c.m
	c.inner.Op = "everystep.ChargeInner"
	return c
}

// call runs one call whose method writes the business row and ends with
// result (layered: through an inner call). A panic of the store fails the
// test.
func (c *caller) call(result func() (string, error)) (v string, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.t.Fatalf("the store panicked: %v", p)
		}
	}()
	method := func(ctx context.Context) (string, error) {
		c.runs.Add(1)
		if err := c.s.Write(ctx, c.id); err != nil {
			return "", err
		}
		return result()
	}
	if c.layered {
		write := method
		method = func(ctx context.Context) (string, error) { return c.do(ctx, &c.inner, write) }
	}
	return c.do(c.t.Context(), &c.m, method)
}

// do is one idem.Do of m on the caller's key.
func (c *caller) do(ctx context.Context, m *idem.Method, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", c.id)
	var h idem.Hasher
	h.Int(100)
	return idem.Do(ctx, c.ex, m, &k, &h, fn)
}

// settled reports whether err is an answer of the method's (its result or
// its stored final error), not the store's or the key's state.
func settled(err error) bool { return err == nil || errors.Is(err, errDeclined) }

// settle calls until the answer settles: a call in progress (a lost
// session's locks and leases end on the server's time: it sees the
// connection close, a lease lapses) or a store that is unavailable for a
// moment is no answer yet. The deadline bounds a hang only; it never
// decides the outcome.
func (c *caller) settle(result func() (string, error)) (string, error) {
	return c.until(func() (string, error) { return c.call(result) })
}

// until repeats call until its answer settles (see settle).
func (c *caller) until(call func() (string, error)) (string, error) {
	for deadline := time.Now().Add(time.Minute); ; {
		v, err := call()
		if settled(err) {
			return v, err
		}
		if !time.Now().Before(deadline) {
			c.t.Fatalf("no answer settled within a minute: last %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lose runs the first call with the reply to its i-th request lost, then
// retries until an answer settles, and checks the guarantees. It reports
// whether a reply was lost.
func lose(t *testing.T, s Store, end ending, i int, layered bool) bool {
	p := lossyproxy.New(t, s.Upstream)
	var seen atomic.Int32
	p.DropNextReplyTo(func([]byte) bool { return seen.Add(1) == int32(i) })
	c := newCaller(t, s, p, layered)
	first, firstErr := c.call(end.first)
	firstRuns := c.runs.Load()
	if firstRuns > 1 {
		t.Errorf("the first call ran its method %d times", firstRuns)
	}
	if end.name == "transient-error" && firstErr == nil {
		t.Errorf("a transient error's call answered success %q", first)
	}
	v, err := first, firstErr
	if !settled(err) || end.name == "transient-error" {
		v, err = c.settle(end.retry)
	}
	if settled(firstErr) && c.runs.Load() != 1 {
		t.Errorf("the first call answered (%q, %v), and the method ran again (%d runs)", first, firstErr, c.runs.Load())
	}
	if settled(firstErr) && (v != first || errors.Is(err, errDeclined) != errors.Is(firstErr, errDeclined)) {
		t.Errorf("the first answer (%q, %v) is not the settled one (%q, %v)", first, firstErr, v, err)
	}
	// The settled answer is stored: replayed without running the method
	// (the lost reply may be one of the replay's requests: the store is
	// then unavailable for a moment, which is no answer).
	runs := c.runs.Load()
	again, againErr := c.settle(func() (string, error) { return "must not run", nil })
	if c.runs.Load() != runs || again != v || errors.Is(againErr, errDeclined) != errors.Is(err, errDeclined) {
		t.Errorf("the settled answer (%q, %v) is not replayed: (%q, %v), %d runs before, %d after", v, err, again, againErr, runs, c.runs.Load())
	}
	if c.layered {
		// The inner call's record holds the same answer.
		inner, innerErr := c.until(func() (string, error) {
			return c.do(t.Context(), &c.inner, func(context.Context) (string, error) { return "must not run", nil })
		})
		if inner != v || errors.Is(innerErr, errDeclined) != errors.Is(err, errDeclined) || !settled(innerErr) {
			t.Errorf("the inner call answers (%q, %v), the outer (%q, %v)", inner, innerErr, v, err)
		}
	}
	rows := s.Rows(t, c.id)
	tx := c.tx
	switch {
	case !tx && rows != int(c.runs.Load()):
		t.Errorf("lease mode: %d business rows for %d runs", rows, c.runs.Load())
	case tx && errors.Is(err, errDeclined) && rows != 0:
		t.Errorf("a final error's writes were committed: %d business rows", rows)
	case tx && err == nil && rows != 1:
		t.Errorf("a success committed %d business rows, not 1", rows)
	}
	t.Logf("first (%q, %v), %d runs, settled (%q, %v)", first, firstErr, c.runs.Load(), v, err)
	return p.Dropped() == 1
}

// Ledger is a business table in memory, for stores in lease mode (their
// method's writes are not in a transaction of the store's): Write and Rows
// are Store's.
type Ledger struct {
	mu   sync.Mutex
	rows map[string]int
}

// Write records one business row for id.
func (l *Ledger) Write(_ context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rows == nil {
		l.rows = map[string]int{}
	}
	l.rows[id]++
	return nil
}

// Rows returns how many rows Write recorded for id.
func (l *Ledger) Rows(_ *testing.T, id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rows[id]
}
