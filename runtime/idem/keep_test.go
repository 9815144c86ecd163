package idem_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// outageStore is a real memstore (on a fake clock) whose chosen operations
// cannot be reached while an outage lasts: they fail with err before
// reaching the store, as a store that is restarting, failing over or cut
// off does.
type outageStore struct {
	*memstore.Store
	clock *fakeClock

	mu        sync.Mutex
	err       error
	ops       map[string]bool // the operations the outage cuts ("complete", "renew", ...)
	downUntil time.Time
	calls     map[string]int
}

func newOutageStore(clock *fakeClock, err error, ops ...string) *outageStore {
	s := &outageStore{Store: memstore.New(memstore.WithClock(clock.Now)), clock: clock, err: err, ops: map[string]bool{}, calls: map[string]int{}}
	for _, op := range ops {
		s.ops[op] = true
	}
	return s
}

// down starts an outage of d from now.
func (s *outageStore) down(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.downUntil = s.clock.Now().Add(d)
}

// cut counts a call of op and reports the outage's error if it is down.
func (s *outageStore) cut(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if s.ops[op] && s.clock.Now().Before(s.downUntil) {
		return fmt.Errorf("outagestore: %s: %w", op, s.err)
	}
	return nil
}

func (s *outageStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *outageStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.cut("claim"); err != nil {
		return idem.Claim{}, err
	}
	return s.Store.Claim(ctx, req)
}

func (s *outageStore) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := s.cut("complete"); err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, token, out, ttl)
}

func (s *outageStore) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	if err := s.cut("release"); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, token)
}

func (s *outageStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if err := s.cut("renew"); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, token, lease)
}

// noRenew hides the Renewer of the store it wraps (and LocalStore: the
// executor then bounds each store call by its store timeout).
type noRenew struct{ idem.Store }

// TestDoKeepsOutcomeThroughOutage: a store that cannot be reached for a
// while right after the method ran (every operation fails: Complete and
// Renew), for kinds of "unreachable" errors and outages of every length
// relative to the lease. Shorter than the lease: the method runs exactly
// once, the caller gets its result once the outcome is stored, and retries
// replay it. Longer than the lease (lease mode's documented limit): the
// executor gives up when the claim cannot be live any more, the caller
// still gets its result, the observer a store error, and a retry after the
// lease runs the method again.
func TestDoKeepsOutcomeThroughOutage(t *testing.T) {
	const lease = 10 * time.Second
	errs := []error{
		fmt.Errorf("dial tcp 127.0.0.1:5432: %w", syscall.ECONNREFUSED),
		&sqlError{"57P01", "FATAL: terminating connection due to administrator command"},
		&sqlError{"57P03", "FATAL: the database system is starting up"},
		redisError("LOADING Redis is loading the dataset in memory"),
		fmt.Errorf("query: %w", context.DeadlineExceeded),
	}
	for _, renews := range []bool{false, true} {
		for _, frac := range []float64{0.01, 0.3, 0.6, 0.9, 0.99, 1.2, 3} {
			for _, outageErr := range errs {
				name := fmt.Sprintf("renewer=%v/outage=%.2f×lease/%v", renews, frac, outageErr)
				t.Run(name, func(t *testing.T) {
					clk := newFakeClock(true)
					st := newOutageStore(clk, outageErr, "complete", "renew", "claim", "release")
					var store idem.Store = st
					if !renews {
						store = noRenew{st}
					}
					var ev eventLog
					ex := idem.NewExecutor(store, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(ev.observe))
					m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
					outage := time.Duration(frac * float64(lease))
					runs := 0
					pay := func(context.Context) (int, error) {
						runs++
						if runs == 1 {
							st.down(outage) // the store goes away as the method returns
						}
						return 100 + runs, nil
					}
					start := clk.Now()
					v, err := call(t.Context(), ex, m, "order-1", pay)
					require.NoError(t, err, "the method ran: its caller gets its result")
					assert.Equal(t, 101, v)
					took := clk.Now().Sub(start)
					if outage < lease {
						assert.GreaterOrEqual(t, took, outage, "the caller is answered once the outcome is stored")
						assert.Contains(t, ev.kinds(), idem.EventCompleted)
						assert.NotContains(t, ev.kinds(), idem.EventStoreError)
						v, err = call(t.Context(), ex, m, "order-1", pay)
						require.NoError(t, err)
						assert.Equal(t, 101, v, "a retry replays the stored outcome")
						assert.Equal(t, 1, runs, "the method ran once")
						return
					}
					// Longer than the lease: the documented limit.
					assert.NotContains(t, ev.kinds(), idem.EventCompleted)
					e, ok := ev.find(idem.EventStoreError)
					require.True(t, ok, "the observer is told: %v", ev.kinds())
					assert.ErrorIs(t, e.Err, outageErr)
					assert.NotContains(t, ev.kinds(), idem.EventOutcomeNotStored, "no substitute for a store that cannot be reached")
					assert.GreaterOrEqual(t, took, lease, "it kept trying while the claim could be live")
					assert.Less(t, took, 3*lease, "and stopped when it could not be")
					assert.Greater(t, st.count("complete"), 3)
					clk.Advance(outage) // the store is back, and the claim has lapsed
					v, err = call(t.Context(), ex, m, "order-1", pay)
					require.NoError(t, err)
					assert.Equal(t, 102, v, "a retry after the lease runs the method again (lease mode's limit)")
					assert.Equal(t, 2, runs)
				})
			}
		}
	}
}

// TestDoKeepRenewsLease: a store whose Complete keeps timing out while its
// Renew answers (a slow write path, a large outcome) for longer than the
// lease: the executor renews the claim, so that the key is not taken over,
// and stores the outcome when Complete passes again.
func TestDoKeepRenewsLease(t *testing.T) {
	const lease = 10 * time.Second
	clk := newFakeClock(true)
	st := newOutageStore(clk, context.DeadlineExceeded, "complete")
	var ev eventLog
	ex := idem.NewExecutor(st, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(ev.observe))
	m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
	runs := 0
	pay := func(context.Context) (int, error) {
		runs++
		st.down(lease + lease/2)
		return 7, nil
	}
	v, err := call(t.Context(), ex, m, "a", pay)
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	assert.Contains(t, ev.kinds(), idem.EventRenewed)
	assert.Contains(t, ev.kinds(), idem.EventCompleted)
	assert.NotContains(t, ev.kinds(), idem.EventStoreError)
	v, err = call(t.Context(), ex, m, "a", pay)
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	assert.Equal(t, 1, runs)

	// Without a Renewer the same failure outlasts the claim: the limit.
	clk = newFakeClock(true)
	st = newOutageStore(clk, context.DeadlineExceeded, "complete")
	ev = eventLog{}
	ex = idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(ev.observe))
	_, err = call(t.Context(), ex, m, "a", pay)
	require.NoError(t, err)
	assert.Contains(t, ev.kinds(), idem.EventStoreError)
	assert.NotContains(t, ev.kinds(), idem.EventRenewed)
}

// TestDoOutcomePendingWhenCallerGivesUp: the caller's context ends while
// the store cannot be reached after the method ran. The caller is told at
// once, with an error that matches ErrOutcomePending and ErrInProgress (not
// its context's error, not a store error: the call ran); a retry meanwhile
// finds the live claim and gets ErrInProgress without running the method;
// the executor goes on in the background and stores the outcome when the
// store is back; then retries replay it. The method runs once.
func TestDoOutcomePendingWhenCallerGivesUp(t *testing.T) {
	const lease = 10 * time.Second
	clk := newFakeClock(false)
	st := newOutageStore(clk, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "complete")
	completed := make(chan struct{})
	var once sync.Once
	var ev eventLog
	observe := func(e idem.Event) {
		ev.observe(e)
		if e.Kind == idem.EventCompleted {
			once.Do(func() { close(completed) })
		}
	}
	ex := idem.NewExecutor(st, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(observe))
	m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
	runs := 0
	pay := func(context.Context) (int, error) {
		runs++
		st.down(lease / 2)
		return 42, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() {
		v, err := call(ctx, ex, m, "a", pay)
		assert.Zero(t, v)
		res <- err
	}()
	clk.WaitSleepers(t, 1) // the executor waits between two attempts
	clk.Advance(time.Second)
	clk.WaitSleepers(t, 1)
	cancel()
	err := <-res
	require.ErrorIs(t, err, idem.ErrOutcomePending)
	require.ErrorIs(t, err, idem.ErrInProgress, "a pending outcome is a call in progress: retry later")
	assert.NotErrorIs(t, err, context.Canceled, "the call ran: it is not a cancelled call")
	var pending *idem.OutcomePendingError
	require.ErrorAs(t, err, &pending)
	assert.Greater(t, pending.RetryAfter, time.Duration(0))
	assert.LessOrEqual(t, pending.RetryAfter, lease)
	assert.ErrorIs(t, pending.Err, syscall.ECONNREFUSED)
	assert.ErrorIs(t, pending.Cause, context.Canceled)

	// A retry while the store is still unreachable for Complete.
	_, err = call(t.Context(), ex, m, "a", pay)
	require.ErrorIs(t, err, idem.ErrInProgress)
	assert.NotErrorIs(t, err, idem.ErrOutcomePending)
	assert.Equal(t, 1, runs)

	// The store comes back: the background attempt stores the outcome.
	clk.WaitSleepers(t, 1)
	clk.Advance(lease / 2)
	select {
	case <-completed:
	case <-time.After(30 * time.Second): // turns a hang into a failure only
		t.Fatalf("the outcome was never stored: %v", ev.kinds())
	}
	v, err := call(t.Context(), ex, m, "a", pay)
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	assert.Equal(t, 1, runs)
	assert.NotContains(t, ev.kinds(), idem.EventStoreError)
}

// TestDoKeepStopsAtLeaseLost: a Complete retried after an outage that
// finds another token holding the key gets ErrLeaseLost, and so does the
// caller: its outcome was not stored and it is told so.
func TestDoKeepStopsAtLeaseLost(t *testing.T) {
	const lease = 10 * time.Second
	clk := newFakeClock(true)
	st := newOutageStore(clk, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "complete")
	var ev eventLog
	ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(ev.observe))
	m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
	key, err := idem.NewKey("", "T.Pay", "a")
	require.NoError(t, err)
	var h idem.Hasher
	h.String("a")
	fp, _ := h.Sum()
	_, err = call(t.Context(), ex, m, "a", func(ctx context.Context) (int, error) {
		st.down(lease / 2)
		// Another worker's claim replaces this one (as after a lapse the
		// executor did not see: a store clock ahead of its own).
		clk.Advance(lease)
		c, err := st.Store.Claim(ctx, idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 99, Lease: lease, TTL: time.Hour})
		require.NoError(t, err)
		require.True(t, c.Claimed)
		clk.Advance(-lease)
		return 1, nil
	})
	require.ErrorIs(t, err, idem.ErrLeaseLost)
	assert.Contains(t, ev.kinds(), idem.EventLeaseLost)
	assert.True(t, errors.Is(err, idem.ErrLeaseLost))
}

// TestDoReleaseThroughOutage: a method that fails with a transient error
// while the store cannot be reached (every operation fails) leaves its
// claim to be released. The caller gets its error at once; the executor
// releases the claim in the background once the store is back, so that a
// retry runs at once instead of waiting out the lease. An outage longer
// than the lease ends the attempts: the lease has lapsed, and a retry takes
// the key over.
func TestDoReleaseThroughOutage(t *testing.T) {
	const (
		lease          = 10 * time.Second
		keepBackoffMax = time.Second // the executor's longest pause between two attempts
	)
	errTransient := errors.New("upstream timeout")
	for _, frac := range []float64{0.01, 0.3, 0.6, 0.85, 1.2, 3} {
		t.Run(fmt.Sprintf("outage=%.2f×lease", frac), func(t *testing.T) {
			clk := newFakeClock(true)
			st := newOutageStore(clk, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "complete", "renew", "claim", "release")
			released := make(chan struct{})
			var once sync.Once
			var ev eventLog
			observe := func(e idem.Event) {
				ev.observe(e)
				if e.Kind == idem.EventReleased {
					once.Do(func() { close(released) })
				}
			}
			ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(observe))
			m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
			outage := time.Duration(frac * float64(lease))
			runs := 0
			pay := func(context.Context) (int, error) {
				runs++
				if runs == 1 {
					st.down(outage) // the store goes away as the method fails
					return 0, errTransient
				}
				return 7, nil
			}
			start := clk.Now()
			_, err := call(t.Context(), ex, m, "order-1", pay)
			require.ErrorIs(t, err, errTransient, "the caller gets the method's error")
			if outage < lease-keepBackoffMax {
				select {
				case <-released:
				case <-time.After(30 * time.Second): // turns a hang into a failure only
					t.Fatalf("the claim was never released: %v", ev.kinds())
				}
				require.Less(t, clk.Now().Sub(start), lease, "released within the lease")
				v, err := call(t.Context(), ex, m, "order-1", pay)
				require.NoError(t, err, "a retry runs at once")
				assert.Equal(t, 7, v)
				assert.Less(t, clk.Now().Sub(start), lease, "without waiting out the lease")
				assert.Equal(t, 2, runs)
				return
			}
			// Longer than the lease: the attempts end with it; a retry
			// after it takes the key over.
			guard := time.Now().Add(30 * time.Second) // turns a hang into a failure only
			for clk.Now().Sub(start) < lease {
				if time.Now().After(guard) {
					t.Fatalf("the background attempts stopped before the lease ended: %v", ev.kinds())
				}
				runtime.Gosched() // the background attempts advance the clock
			}
			clk.Advance(outage)
			v, err := call(t.Context(), ex, m, "order-1", pay)
			require.NoError(t, err)
			assert.Equal(t, 7, v)
			assert.Equal(t, 2, runs)
		})
	}
}
