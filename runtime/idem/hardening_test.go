package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// callFP is call with a fingerprint of its own (a payload that differs from
// id's).
func callFP[T any](ctx context.Context, ex *idem.Executor, m *idem.Method, id, payload string, fn func(context.Context) (T, error)) (T, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(payload)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

type cyclic struct{ Next *cyclic }

// huge is one byte more than every store accepts as an outcome.
var huge = sync.OnceValue(func() string { return strings.Repeat("x", idem.MaxOutcomeLen+1) })

// hugeCodec encodes every result as more bytes than a store accepts.
type hugeCodec struct{ idem.JSONCodec }

func (hugeCodec) Marshal(any) ([]byte, error) { return []byte(huge()), nil }

// errRefusedBytes is how PostgreSQL refuses a NUL byte in a text column: not a
// transient failure, the same bytes are refused every time.
var errRefusedBytes = errors.New(`ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`)

// TestDoUnstorableOutcome: once the method has run, an outcome that cannot
// be stored (the codec refuses it, it is too large, the store refuses its
// bytes) never releases the key: a substitute final outcome says the result
// was not stored, the first caller gets its result, and retries get
// ErrOutcomeNotStored instead of running the method again.
func TestDoUnstorableOutcome(t *testing.T) {
	type result struct {
		v   any
		err error
	}
	cases := []struct {
		name   string
		codec  idem.Codec
		refuse func(idem.Outcome) error
		run    func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result
		check  func(t *testing.T, r result)
		// completes is what the store is asked to store, in order.
		completes []string
		// txCommitted: in transactional mode the substitute is committed
		// with the method's writes (a success) or without them (a final
		// error); false: the commit fails and nothing is committed.
		txCommitted, txDiscard bool
	}{
		{
			name: "NaN",
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (float64, error) { fn(ctx); return math.NaN(), nil })
				return result{v, err}
			},
			check:       func(t *testing.T, r result) { require.NoError(t, r.err); assert.True(t, math.IsNaN(r.v.(float64))) },
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true,
		},
		{
			name: "+Inf in a struct",
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				type quote struct{ Price float64 }
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (quote, error) { fn(ctx); return quote{math.Inf(1)}, nil })
				return result{v.Price, err}
			},
			check:       func(t *testing.T, r result) { require.NoError(t, r.err); assert.Equal(t, math.Inf(1), r.v) },
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true,
		},
		{
			name: "-Inf",
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (float64, error) { fn(ctx); return math.Inf(-1), nil })
				return result{v, err}
			},
			check:       func(t *testing.T, r result) { require.NoError(t, r.err); assert.Equal(t, math.Inf(-1), r.v) },
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true,
		},
		{
			name: "cycle",
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (*cyclic, error) {
					fn(ctx)
					n := &cyclic{}
					n.Next = n
					return n, nil
				})
				return result{v, err}
			},
			check: func(t *testing.T, r result) {
				require.NoError(t, r.err)
				n := r.v.(*cyclic)
				assert.Same(t, n, n.Next)
			},
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true,
		},
		{
			name:  "result over MaxOutcomeLen",
			codec: hugeCodec{},
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (int, error) { fn(ctx); return 7, nil })
				return result{v, err}
			},
			check:       func(t *testing.T, r result) { require.NoError(t, r.err); assert.Equal(t, 7, r.v) },
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true,
		},
		{
			name: "final error over MaxOutcomeLen",
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (int, error) { fn(ctx); return 0, idem.Final(errors.New(huge())) })
				return result{v, err}
			},
			check: func(t *testing.T, r result) {
				require.ErrorIs(t, r.err, idem.ErrFinal)
				assert.Len(t, r.err.Error(), idem.MaxOutcomeLen+1, "the first caller gets the method's own error")
			},
			completes:   []string{"FAILED_FINAL idem:unstorable"},
			txCommitted: true, txDiscard: true,
		},
		{
			name:   "store refuses the bytes of a result",
			refuse: refuseStatus(idem.StatusSucceeded, errRefusedBytes),
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (string, error) { fn(ctx); return "ok\x00", nil })
				return result{v, err}
			},
			check:     func(t *testing.T, r result) { require.NoError(t, r.err); assert.Equal(t, "ok\x00", r.v) },
			completes: []string{"SUCCEEDED ", "SUCCEEDED ", "SUCCEEDED ", "FAILED_FINAL idem:unstorable"},
		},
		{
			name:   "store refuses the bytes of a final error",
			refuse: refuseMessage("\x00", errRefusedBytes),
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (int, error) { fn(ctx); return 0, idem.Final(errors.New("bad \x00 byte")) })
				return result{v, err}
			},
			check: func(t *testing.T, r result) {
				require.ErrorIs(t, r.err, idem.ErrFinal)
				assert.Equal(t, "bad \x00 byte", r.err.Error())
			},
			completes: []string{"FAILED_FINAL ", "FAILED_FINAL ", "FAILED_FINAL ", "FAILED_FINAL idem:unstorable"},
		},
		{
			name:   "store answers ErrTooLarge",
			refuse: refuseStatus(idem.StatusSucceeded, fmt.Errorf("somestore: complete: %w", idem.ErrTooLarge)),
			run: func(ctx context.Context, ex *idem.Executor, m *idem.Method, fn func(context.Context)) result {
				v, err := call(ctx, ex, m, "a", func(ctx context.Context) (int, error) { fn(ctx); return 3, nil })
				return result{v, err}
			},
			check:     func(t *testing.T, r result) { require.NoError(t, r.err); assert.Equal(t, 3, r.v) },
			completes: []string{"SUCCEEDED ", "FAILED_FINAL idem:unstorable"},
		},
	}
	for _, tc := range cases {
		t.Run("lease/"+tc.name, func(t *testing.T) {
			st := newFaultStore(nil)
			st.refuse = tc.refuse
			var ev eventLog
			opts := []idem.Option{idem.WithObserver(ev.observe), idem.WithClock(newFakeClock(true)), idem.SingleTenant()}
			if tc.codec != nil {
				opts = append(opts, idem.WithCodec(tc.codec))
			}
			ex := idem.NewExecutor(st, opts...)
			m := &idem.Method{Op: "T.M", TTL: time.Minute}
			runs := 0
			first := tc.run(t.Context(), ex, m, func(context.Context) { runs++ })
			tc.check(t, first)
			again := tc.run(t.Context(), ex, m, func(context.Context) { runs++ })
			assert.Equal(t, 1, runs, "the method ran once")
			require.ErrorIs(t, again.err, idem.ErrOutcomeNotStored)
			assert.ErrorIs(t, again.err, idem.ErrFinal)
			var got []string
			for _, out := range st.completes {
				got = append(got, out.Status.String()+" "+out.ErrCode)
			}
			assert.Equal(t, tc.completes, got)
			assert.Equal(t, idem.NotStoredCode, st.completes[len(st.completes)-1].ErrCode)
			e, ok := ev.find(idem.EventOutcomeNotStored)
			require.True(t, ok, "the observer is told: %v", ev.kinds())
			assert.Error(t, e.Err)
			assert.NotContains(t, ev.kinds(), idem.EventReleased)
		})
		t.Run("tx/"+tc.name, func(t *testing.T) {
			st := &txStore{faultStore: newFaultStore(nil)}
			st.refuse = tc.refuse
			var ev eventLog
			opts := []idem.Option{idem.WithObserver(ev.observe), idem.WithClock(newFakeClock(true)), idem.SingleTenant()}
			if tc.codec != nil {
				opts = append(opts, idem.WithCodec(tc.codec))
			}
			ex := idem.NewExecutor(st, opts...)
			m := &idem.Method{Op: "T.M", TTL: time.Minute}
			runs := 0
			fn := func(ctx context.Context) { runs++; write(ctx, "row") }
			first := tc.run(t.Context(), ex, m, fn)
			again := tc.run(t.Context(), ex, m, fn)
			if !tc.txCommitted {
				// The commit failed: nothing was committed, so the caller
				// must not see success, and a retry runs the method again.
				require.Error(t, first.err)
				assert.NotErrorIs(t, first.err, idem.ErrFinal)
				assert.Empty(t, st.writes)
				assert.Equal(t, 2, runs)
				return
			}
			tc.check(t, first)
			assert.Equal(t, 1, runs, "the method ran once")
			require.ErrorIs(t, again.err, idem.ErrOutcomeNotStored)
			want := []string{"row"}
			if tc.txDiscard {
				want = nil
			}
			assert.Equal(t, want, st.writes, "a success commits its writes with the substitute outcome; a final error discards them")
			assert.Equal(t, []string{fmt.Sprintf("complete FAILED_FINAL idem:unstorable discard=%v", tc.txDiscard)}, st.endedList())
			_, ok := ev.find(idem.EventOutcomeNotStored)
			assert.True(t, ok, "the observer is told: %v", ev.kinds())
		})
	}
}

func refuseStatus(s idem.Status, err error) func(idem.Outcome) error {
	return func(out idem.Outcome) error {
		if out.Status == s && out.ErrCode != idem.NotStoredCode {
			return err
		}
		return nil
	}
}

func refuseMessage(sub string, err error) func(idem.Outcome) error {
	return func(out idem.Outcome) error {
		if strings.Contains(out.ErrMessage, sub) {
			return err
		}
		return nil
	}
}

// TestDoCompleteDownKeepsResult: when the store cannot be reached at all
// after the method ran, for longer than the claim can be live, the caller
// still gets its result, and the observer reports the store error.
func TestDoCompleteDownKeepsResult(t *testing.T) {
	st := newFaultStore(nil)
	st.failComplete = 1000
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithObserver(ev.observe), idem.WithClock(newFakeClock(true)), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 5, nil })
	require.NoError(t, err)
	assert.Equal(t, 5, v)
	assert.Greater(t, len(st.completes), 3, "tried while the claim could be live")
	for _, out := range st.completes {
		assert.NotEqual(t, idem.NotStoredCode, out.ErrCode, "no substitute for a store that cannot be reached")
	}
	assert.Contains(t, ev.kinds(), idem.EventStoreError)
	assert.NotContains(t, ev.kinds(), idem.EventOutcomeNotStored)
}

// sqlError is an error with an SQLSTATE, as pgx's *pgconn.PgError.
type sqlError struct{ code, msg string }

func (e *sqlError) Error() string    { return e.msg + " (SQLSTATE " + e.code + ")" }
func (e *sqlError) SQLState() string { return e.code }

// redisError is a Redis error reply, as go-redis's.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// timeoutError is a network timeout (a net.Error).
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestDoSubstituteOnlyWhenTheStoreAnswers: after its retries, the executor
// stores the substitute outcome when the store answered and refused, not
// when it could not be reached: it would take the real outcome a moment
// later, so the executor keeps trying while the claim can be live.
func TestDoSubstituteOnlyWhenTheStoreAnswers(t *testing.T) {
	cases := []struct {
		err        error
		substitute bool
	}{
		{fmt.Errorf("write tcp: %w", syscall.ECONNRESET), false},
		{fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), false},
		{fmt.Errorf("write: %w", syscall.EPIPE), false},
		{fmt.Errorf("read: %w", io.EOF), false},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}, false},
		{fmt.Errorf("pool: %w", net.ErrClosed), false},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{&sqlError{"57P01", "FATAL: terminating connection due to administrator command"}, false},
		{&sqlError{"08006", "connection failure"}, false},
		{&sqlError{"40001", "could not serialize access"}, false},
		{&sqlError{"53300", "too many connections"}, false},
		{fmt.Errorf("redisstore: %w", redisError("LOADING Redis is loading the dataset in memory")), false},
		{redisError("READONLY You can't write against a read only replica."), false},
		{&sqlError{"22021", `invalid byte sequence for encoding "UTF8": 0x00`}, true},
		{&sqlError{"54000", "index row size 2720 exceeds btree version 4 maximum 2704"}, true},
		{redisError("ERR string exceeds maximum allowed size"), true},
		{errors.New("mystore: cannot store this outcome"), true},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			st := newFaultStore(nil)
			st.refuse = refuseStatus(idem.StatusSucceeded, tc.err)
			var ev eventLog
			ex := idem.NewExecutor(st, idem.WithClock(newFakeClock(true)), idem.WithObserver(ev.observe), idem.SingleTenant())
			m := &idem.Method{Op: "T.M", TTL: time.Minute}
			v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 8, nil })
			require.NoError(t, err)
			assert.Equal(t, 8, v)
			if tc.substitute {
				assert.Len(t, st.completes, 4)
				assert.Contains(t, ev.kinds(), idem.EventOutcomeNotStored)
				return
			}
			assert.Greater(t, len(st.completes), 3, "a store that cannot be reached is tried while the claim can be live")
			assert.Contains(t, ev.kinds(), idem.EventStoreError)
			assert.NotContains(t, ev.kinds(), idem.EventOutcomeNotStored)
		})
	}
}

// plainStore hides every optional interface of the store it wraps.
type plainStore struct{ idem.Store }

func TestNewExecutorRejectsBadOptions(t *testing.T) {
	cases := []struct {
		store idem.Store
		opt   idem.Option
		want  string
	}{
		{memstore.New(), idem.WithLease(0), "idem: WithLease(0s): lease must be > 0"},
		{memstore.New(), idem.WithLease(-time.Second), "idem: WithLease(-1s): lease must be > 0"},
		{memstore.New(), idem.WithStoreTimeout(0), "idem: WithStoreTimeout(0s): timeout must be > 0"},
		{memstore.New(), idem.WithStoreTimeout(-time.Millisecond), "idem: WithStoreTimeout(-1ms): timeout must be > 0"},
		{memstore.New(), idem.WithTenant(nil), "idem: WithTenant(nil)"},
		{memstore.New(), idem.WithCodec(nil), "idem: WithCodec(nil)"},
		{memstore.New(), idem.WithClock(nil), "idem: WithClock(nil)"},
		{plainStore{memstore.New()}, idem.WithRenewal(true), "idem: WithRenewal(true): the store (idem_test.plainStore) does not implement idem.Renewer"},
		{nil, nil, "idem: NewExecutor: store is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			opts := []idem.Option{idem.SingleTenant()}
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			assert.PanicsWithValue(t, tc.want, func() { idem.NewExecutor(tc.store, opts...) })
		})
	}
	assert.NotPanics(t, func() {
		idem.NewExecutor(memstore.New(), idem.WithObserver(nil), idem.WithRenewal(false), idem.WithLease(time.Nanosecond), idem.SingleTenant())
		idem.NewExecutor(newFaultStore(nil), idem.WithRenewal(true), idem.SingleTenant())
		idem.NewExecutor(&txStore{faultStore: newFaultStore(nil)}, idem.WithRenewal(true), idem.SingleTenant())
	}, "valid options, and renewal on a store that renews or holds claims in a transaction")
}

func TestDoRejectsBadMethod(t *testing.T) {
	long := strings.Repeat("o", idem.MaxOpLen+1)
	cases := []struct {
		name   string
		m      idem.Method
		tenant string
		plain  bool // the store does not implement idem.Renewer
		is     error
		msg    string
	}{
		{name: "no TTL", m: idem.Method{Op: "T.M"}, is: idem.ErrMisconfigured, msg: "TTL 0s must be > 0"},
		{name: "negative TTL", m: idem.Method{Op: "T.M", TTL: -time.Second}, is: idem.ErrMisconfigured, msg: "TTL -1s must be > 0"},
		{name: "negative lease", m: idem.Method{Op: "T.M", TTL: time.Minute, Lease: -time.Second}, is: idem.ErrMisconfigured, msg: "Lease -1s must be >= 0"},
		{name: "lease over TTL", m: idem.Method{Op: "T.M", TTL: time.Minute, Lease: 2 * time.Minute}, is: idem.ErrMisconfigured, msg: "Lease 2m0s exceeds TTL 1m0s"},
		{name: "negative wait", m: idem.Method{Op: "T.M", TTL: time.Minute, Wait: -time.Second}, is: idem.ErrMisconfigured, msg: "Wait -1s must be >= 0"},
		{name: "renew without a Renewer", m: idem.Method{Op: "T.M", TTL: time.Minute, Renew: true}, plain: true, is: idem.ErrMisconfigured, msg: "does not implement idem.Renewer"},
		{name: "op too long", m: idem.Method{Op: long, TTL: time.Minute}, is: idem.ErrTooLarge, msg: "operation name of 1025 bytes"},
		{name: "tenant too long", m: idem.Method{Op: "T.M", TTL: time.Minute}, tenant: strings.Repeat("t", idem.MaxTenantLen+1), is: idem.ErrTooLarge, msg: "tenant of 1025 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newFaultStore(nil)
			var store idem.Store = st
			if tc.plain {
				store = plainStore{st}
			}
			ex := idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return tc.tenant }))
			called := false
			_, err := call(t.Context(), ex, &tc.m, "a", func(context.Context) (int, error) { called = true; return 1, nil })
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.msg)
			assert.False(t, called)
			assert.Empty(t, st.callList(), "refused before the store is asked")
		})
	}
}

// TestDoClaimReplyLost: a Claim the store applied but whose reply was lost
// is retried with the same token, and the retry finds the caller's own
// claim instead of blocking it for the lease.
func TestDoClaimReplyLost(t *testing.T) {
	st := newFaultStore(nil)
	st.dropClaim = 1
	ex := idem.NewExecutor(st, idem.WithClock(newFakeClock(true)), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	v, err := call(t.Context(), ex, m, "a", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	claims := st.claimList()
	require.Len(t, claims, 2)
	assert.Equal(t, claims[0].Token, claims[1].Token, "the retry carries the same token")
	v, err = call(t.Context(), ex, m, "a", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Equal(t, 1, runs)
}

// TestDoClaimGivesUpReleases: when every Claim reply is lost, the executor
// gives up and releases the claim it may hold, so that the key is not
// blocked for the lease.
func TestDoClaimGivesUpReleases(t *testing.T) {
	st := newFaultStore(nil)
	st.dropClaim = 3
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithClock(newFakeClock(true)), idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, errTransport)
	claims := st.claimList()
	require.Len(t, claims, 3)
	assert.Equal(t, []string{
		fmt.Sprintf("claim %d", claims[0].Token), fmt.Sprintf("claim %d", claims[0].Token), fmt.Sprintf("claim %d", claims[0].Token),
		fmt.Sprintf("release %d", claims[0].Token),
	}, st.callList())
	assert.Equal(t, []idem.EventKind{idem.EventStoreRetry, idem.EventStoreRetry, idem.EventStoreError}, ev.kinds())
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err, "the key is free at once")
	assert.Equal(t, 2, v)
}

// TestDoClaimRefusalIsFinal: a store that refuses a claim (full, a
// tenant's share used, too large) wrote nothing; the method does not run,
// and the executor neither retries nor releases.
func TestDoClaimRefusalIsFinal(t *testing.T) {
	for _, refusal := range []error{idem.ErrStoreFull, &idem.TenantQuotaError{Tenant: "a", Share: 1}, idem.ErrTooLarge} {
		t.Run(refusal.Error(), func(t *testing.T) {
			st := newFaultStore(nil)
			ex := idem.NewExecutor(refusing{st, refusal}, idem.WithClock(newFakeClock(true)), idem.SingleTenant())
			m := &idem.Method{Op: "T.M", TTL: time.Minute}
			ran := false
			_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { ran = true; return 1, nil })
			require.ErrorIs(t, err, refusal)
			assert.False(t, ran, "the method did not run")
			assert.Empty(t, st.callList())
		})
	}
}

// refusing refuses every claim with err.
type refusing struct {
	*faultStore
	err error
}

func (r refusing) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, fmt.Errorf("somestore: claim: %w", r.err)
}

// TestDoCompleteReplyLost: a Complete the store applied but whose reply was
// lost is retried, and the retry is the same success (the store's duty), so
// the caller is not told ErrLeaseLost for a call whose outcome was stored.
func TestDoCompleteReplyLost(t *testing.T) {
	st := newFaultStore(nil)
	st.dropComplete = 1
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithClock(newFakeClock(true)), idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 4, nil })
	require.NoError(t, err)
	assert.Equal(t, 4, v)
	assert.Equal(t, []idem.EventKind{idem.EventClaimed, idem.EventStoreRetry, idem.EventCompleted}, ev.kinds())
	v, err = call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 5, nil })
	require.NoError(t, err)
	assert.Equal(t, 4, v)
}

// TestDoGoexit: a method that calls runtime.Goexit (t.FailNow, log.Fatal
// paths) is treated like a panic: the claim is released (lease mode) or the
// transaction rolled back, and Goexit goes on.
func TestDoGoexit(t *testing.T) {
	goexit := func(ex *idem.Executor, m *idem.Method) {
		done := make(chan struct{})
		returned := false
		go func() {
			defer close(done)
			_, _ = call(context.Background(), ex, m, "a", func(context.Context) (int, error) {
				runtime.Goexit()
				return 0, nil
			})
			returned = true
		}()
		<-done
		require.False(t, returned, "Goexit went on")
	}
	t.Run("lease", func(t *testing.T) {
		st := newFaultStore(nil)
		var ev eventLog
		ex := idem.NewExecutor(st, idem.WithObserver(ev.observe), idem.SingleTenant())
		m := &idem.Method{Op: "T.M", TTL: time.Minute}
		goexit(ex, m)
		e, ok := ev.find(idem.EventReleased)
		require.True(t, ok, "released: %v", ev.kinds())
		assert.ErrorContains(t, e.Err, "runtime.Goexit")
		v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
		require.NoError(t, err, "the key is free")
		assert.Equal(t, 2, v)
	})
	t.Run("lease with renewal", func(t *testing.T) {
		clk := newFakeClock(false)
		st := newFaultStore(clk)
		ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithRenewal(true), idem.SingleTenant())
		m := &idem.Method{Op: "T.M", TTL: time.Minute}
		goexit(ex, m)
		assert.Zero(t, clk.Sleepers(), "the renewals stopped")
		assert.Equal(t, 1, len(st.releases))
	})
	t.Run("tx", func(t *testing.T) {
		st := &txStore{faultStore: newFaultStore(nil)}
		ex := idem.NewExecutor(st, idem.SingleTenant())
		m := &idem.Method{Op: "T.M", TTL: time.Minute}
		goexit(ex, m)
		assert.Equal(t, []string{"rollback"}, st.endedList())
	})
	t.Run("panic", func(t *testing.T) {
		st := newFaultStore(nil)
		var ev eventLog
		ex := idem.NewExecutor(st, idem.WithObserver(ev.observe), idem.SingleTenant())
		m := &idem.Method{Op: "T.M", TTL: time.Minute}
		assert.PanicsWithValue(t, "boom", func() {
			_, _ = call(t.Context(), ex, m, "a", func(context.Context) (int, error) { panic("boom") })
		})
		e, ok := ev.find(idem.EventReleased)
		require.True(t, ok)
		assert.ErrorContains(t, e.Err, "panic: boom")
	})
}

// TestDoRenewsLease: with renewal on, a method that runs for more than
// three leases keeps its key: the executor renews the claim every third of
// the lease, in the executor's (here virtual) time, and stops when the
// method returns.
func TestDoRenewsLease(t *testing.T) {
	for _, how := range []string{"executor", "method"} {
		t.Run(how, func(t *testing.T) {
			clk := newFakeClock(false)
			st := newFaultStore(clk)
			var ev eventLog
			opts := []idem.Option{idem.WithClock(clk), idem.WithLease(30 * time.Second), idem.WithObserver(ev.observe), idem.SingleTenant()}
			m := &idem.Method{Op: "T.M", TTL: 10 * time.Minute}
			if how == "executor" {
				opts = append(opts, idem.WithRenewal(true))
			} else {
				m.Renew = true
			}
			ex := idem.NewExecutor(st, opts...)
			started, finish := make(chan struct{}), make(chan struct{})
			type result struct {
				v   int
				err error
			}
			res := make(chan result, 1)
			go func() {
				v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) {
					close(started)
					<-finish
					return 1, nil
				})
				res <- result{v, err}
			}()
			<-started
			for i := 1; i <= 10; i++ {
				clk.WaitSleepers(t, 1)
				clk.Advance(10 * time.Second)
				st.waitRenewals(t, i)
			}
			_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
			require.ErrorIs(t, err, idem.ErrInProgress, "after 100s the 30s lease still holds")
			close(finish)
			r := <-res
			require.NoError(t, r.err)
			assert.Equal(t, 1, r.v)
			assert.Zero(t, clk.Sleepers(), "renewal stopped when the method returned")
			v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 3, nil })
			require.NoError(t, err)
			assert.Equal(t, 1, v)
			assert.Equal(t, 30*time.Second, st.claimList()[0].Lease)
			renewed := 0
			for _, k := range ev.kinds() {
				if k == idem.EventRenewed {
					renewed++
				}
			}
			assert.Equal(t, 10, renewed)
		})
	}
}

// TestDoRenewalLostCancelsMethod: when a renewal finds the claim taken, the
// method's context is cancelled with the cause ErrLeaseLost, so that a
// well-behaved method stops before its side effect.
func TestDoRenewalLostCancelsMethod(t *testing.T) {
	returns := map[string]func(ctx context.Context) error{
		"cause": context.Cause,
		"err":   func(ctx context.Context) error { return ctx.Err() },
	}
	for name, ret := range returns {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock(false)
			st := newFaultStore(clk)
			st.renewFault = fmt.Errorf("faultstore: renew: %w", idem.ErrLeaseLost)
			var ev eventLog
			ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithRenewal(true), idem.WithObserver(ev.observe), idem.SingleTenant())
			m := &idem.Method{Op: "T.M", TTL: 10 * time.Minute}
			res := make(chan error, 1)
			go func() {
				_, err := call(t.Context(), ex, m, "a", func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, ret(ctx)
				})
				res <- err
			}()
			clk.WaitSleepers(t, 1)
			clk.Advance(idem.DefaultLease / 3)
			err := <-res
			require.ErrorIs(t, err, idem.ErrLeaseLost, "the caller is told why the method stopped")
			assert.Contains(t, ev.kinds(), idem.EventLeaseLost)
		})
	}
}

// TestDoRenewalSurvivesAFailure: a renewal that fails for another reason is
// reported and tried again at the next interval.
func TestDoRenewalSurvivesAFailure(t *testing.T) {
	clk := newFakeClock(false)
	st := newFaultStore(clk)
	st.renewFault = errTransport
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithRenewal(true), idem.WithLease(30*time.Second), idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: 10 * time.Minute}
	finish := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := call(t.Context(), ex, m, "a", func(ctx context.Context) (int, error) {
			<-finish
			return 1, ctx.Err()
		})
		res <- err
	}()
	clk.WaitSleepers(t, 1)
	clk.Advance(10 * time.Second)
	st.waitRenewals(t, 1)
	st.mu.Lock()
	st.renewFault = nil
	st.mu.Unlock()
	clk.WaitSleepers(t, 1)
	clk.Advance(10 * time.Second)
	st.waitRenewals(t, 2)
	clk.WaitSleepers(t, 1)
	clk.Advance(15 * time.Second) // 35s after the claim: held by the renewal at 20s
	_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
	require.ErrorIs(t, err, idem.ErrInProgress)
	close(finish)
	require.NoError(t, <-res)
	e, ok := ev.find(idem.EventStoreError)
	require.True(t, ok, "%v", ev.kinds())
	assert.ErrorIs(t, e.Err, errTransport)
}

// TestDoLeaseFromDeadline: with renewal on, the first lease covers the time
// until the caller's deadline plus the store timeout, capped at the TTL.
func TestDoLeaseFromDeadline(t *testing.T) {
	cases := []struct {
		name     string
		renew    bool
		deadline time.Duration // 0: none
		ttl      time.Duration
		min, max time.Duration
	}{
		{"no deadline", true, 0, time.Hour, 30 * time.Second, 30 * time.Second},
		{"deadline within the lease", true, 10 * time.Second, time.Hour, 30 * time.Second, 30 * time.Second},
		{"deadline past the lease", true, 2 * time.Minute, time.Hour, 2*time.Minute + 5*time.Second, 2*time.Minute + 5*time.Second},
		{"capped at the TTL", true, 2 * time.Minute, time.Minute, time.Minute, time.Minute},
		{"renewal off", false, 2 * time.Minute, time.Hour, 30 * time.Second, 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := idemtest.NewFakeClock(time.Now(), false) // the context's deadline is in real time
			st := newFaultStore(clk)
			ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithRenewal(tc.renew), idem.WithLease(30*time.Second), idem.WithStoreTimeout(5*time.Second), idem.SingleTenant())
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(tc.deadline))
				defer cancel()
			}
			_, err := call(ctx, ex, &idem.Method{Op: "T.M", TTL: tc.ttl}, "a", func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
			lease := st.claimList()[0].Lease
			assert.GreaterOrEqual(t, lease, tc.min)
			assert.LessOrEqual(t, lease, tc.max)
		})
	}
}

// TestDoSchemeChange: a retry whose fingerprint was computed by another
// scheme (a deploy in between) is replayed, not refused; with the same
// scheme, or an unknown one, a different fingerprint is still a conflict.
func TestDoSchemeChange(t *testing.T) {
	cases := []struct {
		first, retry uint32
		replay       bool
	}{
		{1, 2, true},
		{1, 1, false},
		{0, 2, false},
		{1, 0, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d-%d", tc.first, tc.retry), func(t *testing.T) {
			st := newFaultStore(nil)
			var ev eventLog
			ex := idem.NewExecutor(st, idem.WithObserver(ev.observe), idem.SingleTenant())
			runs := 0
			fn := func(context.Context) (int, error) { runs++; return runs, nil }
			_, err := callFP(t.Context(), ex, &idem.Method{Op: "T.M", TTL: time.Minute, Scheme: tc.first}, "a", "old", fn)
			require.NoError(t, err)
			assert.Equal(t, tc.first, st.claimList()[0].Scheme, "the claim carries the method's scheme")
			v, err := callFP(t.Context(), ex, &idem.Method{Op: "T.M", TTL: time.Minute, Scheme: tc.retry}, "a", "new", fn)
			assert.Equal(t, 1, runs)
			if !tc.replay {
				require.ErrorIs(t, err, idem.ErrPayloadMismatch)
				assert.NotContains(t, ev.kinds(), idem.EventSchemeChanged)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, v)
			assert.Equal(t, []idem.EventKind{idem.EventClaimed, idem.EventCompleted, idem.EventSchemeChanged, idem.EventReplayed}, ev.kinds())
		})
	}
}

// TestDoSchemeChangeTakesOverLapsedClaim: a claim made before a deploy whose
// worker died is taken over after its lease by a retry of the new scheme,
// instead of answering ErrInProgress until the record expires.
func TestDoSchemeChangeTakesOverLapsedClaim(t *testing.T) {
	clk := newFakeClock(false)
	st := newFaultStore(clk)
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithObserver(ev.observe), idem.SingleTenant())
	key, err := idem.NewKey("", "T.M", "a")
	require.NoError(t, err)
	var h idem.Hasher
	h.String("old")
	fp, err := h.Sum()
	require.NoError(t, err)
	claim, err := st.Claim(t.Context(), idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 7, Lease: 30 * time.Second, TTL: time.Hour, Scheme: 1})
	require.NoError(t, err)
	require.True(t, claim.Claimed)
	m := &idem.Method{Op: "T.M", TTL: time.Hour, Scheme: 2}
	_, err = callFP(t.Context(), ex, m, "a", "new", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, idem.ErrInProgress, "the old claim's lease holds")
	clk.Advance(31 * time.Second)
	v, err := callFP(t.Context(), ex, m, "a", "new", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	assert.Equal(t, 2, v)
	v, err = callFP(t.Context(), ex, m, "a", "new", func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 2, v)
	assert.Contains(t, ev.kinds(), idem.EventTakenOver)
}

// TestDoUndecodableOutcome: a stored outcome that no longer decodes into the
// result type (a deploy changed it) is an error matching ErrUndecodable and
// the zero value, never a half-decoded value.
func TestDoUndecodableOutcome(t *testing.T) {
	type v1 struct {
		A int
		B string
	}
	type v2 struct {
		A int
		B int
	}
	st := newFaultStore(nil)
	var ev eventLog
	ex := idem.NewExecutor(st, idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	_, err := call(t.Context(), ex, m, "a", func(context.Context) (v1, error) { return v1{A: 1, B: "x"}, nil })
	require.NoError(t, err)
	called := false
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (v2, error) { called = true; return v2{}, nil })
	require.ErrorIs(t, err, idem.ErrUndecodable)
	assert.Zero(t, v, "never a half-decoded value")
	assert.False(t, called)
	e, ok := ev.find(idem.EventUndecodable)
	require.True(t, ok, "%v", ev.kinds())
	assert.ErrorIs(t, e.Err, idem.ErrUndecodable)
	assert.NotContains(t, ev.kinds(), idem.EventStoreError)
}

// TestDoCallerCancellation: a claim or a wait that ends because the
// caller's context is done is the caller's doing, not a store error: the
// error is the context's, the event is EventCanceled, logged at Debug.
func TestDoCallerCancellation(t *testing.T) {
	logged := func(ev *eventLog) string {
		var buf bytes.Buffer
		log := idem.LogEvents(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, e := range ev.evs {
			log(e)
		}
		return buf.String()
	}
	t.Run("claim", func(t *testing.T) {
		var ev eventLog
		ex := idem.NewExecutor(newFaultStore(nil), idem.WithObserver(ev.observe), idem.SingleTenant())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := call(ctx, ex, &idem.Method{Op: "T.M", TTL: time.Minute}, "a", func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []idem.EventKind{idem.EventCanceled}, ev.kinds())
		out := logged(&ev)
		assert.Contains(t, out, "level=DEBUG")
		assert.Contains(t, out, "event=canceled")
		assert.NotContains(t, out, "level=ERROR")
	})
	t.Run("claim in a transaction", func(t *testing.T) {
		var ev eventLog
		ex := idem.NewExecutor(&txStore{faultStore: newFaultStore(nil)}, idem.WithObserver(ev.observe), idem.SingleTenant())
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := call(ctx, ex, &idem.Method{Op: "T.M", TTL: time.Minute}, "a", func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []idem.EventKind{idem.EventCanceled}, ev.kinds())
	})
	t.Run("wait", func(t *testing.T) {
		clk := newFakeClock(false)
		st := newFaultStore(clk)
		var ev eventLog
		ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithObserver(ev.observe), idem.SingleTenant())
		m := &idem.Method{Op: "T.M", TTL: time.Minute, Wait: 10 * time.Second}
		key, err := idem.NewKey("", "T.M", "a")
		require.NoError(t, err)
		var h idem.Hasher
		h.String("a")
		fp, _ := h.Sum()
		_, err = st.Claim(t.Context(), idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 7, Lease: 30 * time.Second, TTL: time.Hour})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		res := make(chan error, 1)
		go func() {
			_, err := call(ctx, ex, m, "a", func(context.Context) (int, error) { return 1, nil })
			res <- err
		}()
		clk.WaitSleepers(t, 1)
		cancel()
		err = <-res
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []idem.EventKind{idem.EventCanceled}, ev.kinds())
		assert.NotContains(t, logged(&ev), "level=ERROR")
	})
}

func TestEventKindNames(t *testing.T) {
	names := map[idem.EventKind]string{
		idem.EventOutcomeNotStored: "outcome_not_stored",
		idem.EventSchemeChanged:    "scheme_changed",
		idem.EventUndecodable:      "undecodable",
		idem.EventCanceled:         "canceled",
		idem.EventRenewed:          "renewed",
	}
	for k, want := range names {
		assert.Equal(t, want, k.String())
	}
}

// TestDoLostRepliesEverywhere loses the reply of (or fails to deliver) any
// one or two of the store operations of a call, for each kind of outcome,
// and checks what a caller and its retry are told: a caller told success
// has its result replayed and the method ran once; a final error is
// replayed; only the method's own transient error lets a retry run it
// again; and a key is not left blocked by a reply that was lost, nor by a
// Release that never reached the store (the executor sends it again).
func TestDoLostRepliesEverywhere(t *testing.T) {
	const lease = 30 * time.Second
	errTransient := errors.New("downstream timeout")
	outcomes := []struct {
		name string
		fn   func() (int, error)
	}{
		{"success", func() (int, error) { return 1, nil }},
		{"final", func() (int, error) { return 0, idem.Final(errors.New("declined")) }},
		{"transient", func() (int, error) { return 0, errTransient }},
	}
	type step struct {
		op int
		f  fault
	}
	var plans [][]step
	for i := range 6 {
		for _, fi := range []fault{dropReply, failSend} {
			plans = append(plans, []step{{i, fi}})
			for j := i + 1; j < 6; j++ {
				for _, fj := range []fault{dropReply, failSend} {
					plans = append(plans, []step{{i, fi}, {j, fj}})
				}
			}
		}
	}
	for _, oc := range outcomes {
		for _, plan := range plans {
			name := fmt.Sprintf("%s/%v", oc.name, plan)
			clk := newFakeClock(true)
			st := newFaultStore(clk)
			st.plan = map[int]fault{}
			for _, s := range plan {
				st.plan[s.op] = s.f
			}
			released := make(chan struct{}, 8)
			observe := func(e idem.Event) {
				if e.Kind == idem.EventReleased {
					released <- struct{}{}
				}
			}
			ex := idem.NewExecutor(st, idem.WithClock(clk), idem.WithLease(lease), idem.SingleTenant(), idem.WithObserver(observe))
			m := &idem.Method{Op: "T.M", TTL: time.Hour}
			runs := 0
			v1, err1 := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { runs++; return oc.fn() })
			st.mu.Lock()
			st.plan = nil
			calls := append([]string(nil), st.calls...)
			st.mu.Unlock()
			lostRelease := false
			for _, s := range plan {
				if s.op < len(calls) && strings.HasPrefix(calls[s.op], "release") && s.f == failSend {
					lostRelease = true
				}
			}
			retry := func() (int, error) {
				return call(t.Context(), ex, m, "a", func(context.Context) (int, error) { runs++; return 2, nil })
			}
			switch oc.name {
			case "success":
				require.NoError(t, err1, name)
				assert.Equal(t, 1, v1, name)
			case "final":
				require.ErrorIs(t, err1, idem.ErrFinal, name)
			case "transient":
				require.ErrorIs(t, err1, errTransient, name)
			}
			if oc.name == "transient" && lostRelease {
				// An undelivered Release is sent again in the background
				// once the store can be reached: the retry then runs at
				// once, without waiting out the lease.
				select {
				case <-released:
				case <-time.After(30 * time.Second): // turns a hang into a failure only
					t.Fatalf("%s: the undelivered Release was never sent again", name)
				}
			}
			v2, err2 := retry()
			switch oc.name {
			case "success":
				require.NoError(t, err2, name)
				assert.Equal(t, 1, v2, "%s: the result is replayed", name)
				assert.Equal(t, 1, runs, name)
			case "final":
				require.ErrorIs(t, err2, idem.ErrFinal, name)
				assert.NotErrorIs(t, err2, idem.ErrOutcomeNotStored, name)
				assert.Equal(t, 1, runs, name)
			case "transient":
				require.NoError(t, err2, name)
				assert.Equal(t, 2, v2, name)
				assert.Equal(t, 2, runs, name)
			}
		}
	}
}

// TestDoFinalSentinelMatchesErrFinal: a final= sentinel's error matches
// ErrFinal and the sentinel on the first call as on its replays, in lease
// and in transactional mode.
func TestDoFinalSentinelMatchesErrFinal(t *testing.T) {
	errDeclined := errors.New("declined")
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			ex := idem.NewExecutor(newFaultStore(nil), idem.SingleTenant())
			if mode == "tx" {
				ex = idem.NewExecutor(&txStore{faultStore: newFaultStore(nil)}, idem.SingleTenant())
			}
			m := &idem.Method{Op: "T.Pay", TTL: time.Hour, Final: []idem.FinalError{{Name: "ErrDeclined", Err: errDeclined}}}
			for i := range 2 {
				var parts idem.KeyParts
				parts.String("id", "order-1")
				var h idem.Hasher
				h.String("100")
				_, err := idem.Do(context.Background(), ex, m, &parts, &h, func(context.Context) (int, error) {
					return 0, fmt.Errorf("charge: %w", errDeclined)
				})
				require.Error(t, err)
				assert.ErrorIs(t, err, errDeclined, "call %d", i)
				assert.ErrorIs(t, err, idem.ErrFinal, "call %d", i)
				assert.Equal(t, "charge: declined", err.Error(), "call %d", i)
			}
		})
	}
}

// TestNewExecutorRequiresTenancy: the tenancy is a choice made where the
// executor is built. Without one, a multi-tenant service would put every
// caller in one key space and answer tenant B's order 1 with tenant A's
// stored outcome; NewExecutor refuses to guess.
func TestNewExecutorRequiresTenancy(t *testing.T) {
	tenant := func(context.Context) string { return "t" }
	const none = "idem: NewExecutor: no tenancy chosen: pass WithTenant(f) to scope records by the caller f " +
		"names, or SingleTenant() if every caller may be answered with another caller's stored " +
		"outcome when it sends that caller's key"
	const both = "idem: WithTenant and SingleTenant both given: choose one tenancy"
	for _, tc := range []struct {
		name string
		opts []idem.Option
		want string // the panic, or "" for none
	}{
		{"none", nil, none},
		{"other options only", []idem.Option{idem.WithLease(time.Second), idem.WithObserver(func(idem.Event) {})}, none},
		{"both", []idem.Option{idem.WithTenant(tenant), idem.SingleTenant()}, both},
		{"both, single first", []idem.Option{idem.SingleTenant(), idem.WithTenant(tenant)}, both},
		{"tenant", []idem.Option{idem.WithTenant(tenant)}, ""},
		{"single", []idem.Option{idem.SingleTenant()}, ""},
		{"single twice", []idem.Option{idem.SingleTenant(), idem.SingleTenant()}, ""},
		{"tenant twice", []idem.Option{idem.WithTenant(tenant), idem.WithTenant(tenant)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func() { idem.NewExecutor(memstore.New(), tc.opts...) }
			if tc.want == "" {
				assert.NotPanics(t, build)
				return
			}
			assert.PanicsWithValue(t, tc.want, build)
		})
	}
}

// TestTenancyScopesRecords: under WithTenant two tenants' identical keys are
// two records (each runs), under SingleTenant they are one (the second
// replays the first's outcome).
func TestTenancyScopesRecords(t *testing.T) {
	type ctxKey struct{}
	tenant := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	for _, tc := range []struct {
		name string
		opt  idem.Option
		runs int
	}{
		{"WithTenant", idem.WithTenant(tenant), 2},
		{"SingleTenant", idem.SingleTenant(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := idem.NewExecutor(memstore.New(), tc.opt)
			runs := 0
			for _, who := range []string{"a", "b"} {
				ctx := context.WithValue(t.Context(), ctxKey{}, who)
				_, err := call(ctx, ex, m, "order-1", func(context.Context) (int, error) { runs++; return runs, nil })
				require.NoError(t, err)
			}
			assert.Equal(t, tc.runs, runs)
		})
	}
}
