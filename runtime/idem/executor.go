package idem

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// DefaultLease is the lease of a claim when neither the executor nor the
// annotation sets one.
const DefaultLease = 30 * time.Second

// GeneratedCodeVersion1 is referenced by code that idemgen generates, so that
// a wrapper generated for an incompatible runtime fails to compile instead of
// misbehaving.
const GeneratedCodeVersion1 = true

// Method describes one idempotent operation: what the annotation of a method
// says, as the generator emits it. Hand-written callers fill it in directly.
type Method struct {
	// Op names the operation in the record key (Type.Method by default).
	Op string
	// TTL is how long the outcome is kept and replayed. Required.
	TTL time.Duration
	// Lease is how long a claim holds before it may be taken over; 0 uses
	// the executor's lease. It is capped at TTL.
	Lease time.Duration
	// Wait is how long a duplicate waits for a running call to finish and
	// replays its outcome (inflight=wait:d); 0 returns ErrInProgress at once.
	Wait time.Duration
	// Final lists the sentinel errors that are business outcomes: stored,
	// replayed, and errors.Is-equal on replay.
	Final []FinalError
	// Sentinels lists further sentinel errors the method may return wrapped
	// in Final (the generator lists the exported error variables of the
	// service's package). They are not final by themselves; a Final error
	// that matches one is stored under its name, and its replay is
	// errors.Is-equal to it.
	Sentinels []FinalError
	// Scheme identifies how the wrapper computes the request fingerprint
	// (the generator derives it from the hashed parameters' types and its
	// encoding version); 0 means unknown. See ClaimRequest.Scheme.
	Scheme uint32
}

// FinalError names a sentinel error for storage. Name is what is stored, so
// it must stay stable while records live (the generator uses the name as
// written in the annotation, e.g. "ErrInsufficientFunds" or "pay.ErrClosed").
type FinalError struct {
	Name string
	Err  error
}

// Executor runs wrapped methods against a Store. It is safe for concurrent
// use and holds no per-call state.
type Executor struct {
	store    Store
	txStore  TxStore
	lease    time.Duration
	tenant   func(context.Context) string
	codec    Codec
	clock    Clock
	now      func() time.Time // clock.Now
	observe  func(Event)      // nil: no observer, and no clock reads for it
	attempts int
	timeout  time.Duration
	local    bool // the store is a LocalStore
}

// Option configures an Executor.
type Option func(*Executor)

// WithLease sets the default lease of a claim (default 30s). An annotation's
// lease= wins.
func WithLease(d time.Duration) Option { return func(e *Executor) { e.lease = d } }

// WithTenant sets the function that reads the tenant from a call's context.
// Records are scoped by tenant; without it every call is in tenant "".
func WithTenant(f func(context.Context) string) Option { return func(e *Executor) { e.tenant = f } }

// WithCodec sets the codec of stored results (default JSONCodec).
func WithCodec(c Codec) Option { return func(e *Executor) { e.codec = c } }

// Clock is the executor's source of time: it measures durations for the
// observer and paces every wait the executor makes (a duplicate waiting for a
// running call, backoff between store retries). Lease and expiry instants
// always come from the store's clock. Tests and simulations pass a virtual
// clock; the default is the system clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the Clock of time.Now and real timers.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or for ctx.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithClock sets the executor's clock (default SystemClock).
func WithClock(c Clock) Option { return func(e *Executor) { e.clock = c } }

// WithObserver sets a function called once per notable event, synchronously;
// it must be fast and safe for concurrent use.
func WithObserver(f func(Event)) Option { return func(e *Executor) { e.observe = f } }

// WithStoreTimeout bounds each store call made after the method ran
// (Complete, Release), which runs detached from the caller's cancellation so
// that a client that gave up does not lose the outcome (default 5s).
func WithStoreTimeout(d time.Duration) Option { return func(e *Executor) { e.timeout = d } }

// NewExecutor returns an Executor on store. If store implements TxStore, the
// claim, the method and the outcome run in one store transaction.
func NewExecutor(store Store, opts ...Option) *Executor {
	e := &Executor{
		store:    store,
		lease:    DefaultLease,
		tenant:   func(context.Context) string { return "" },
		codec:    JSONCodec{},
		clock:    SystemClock{},
		attempts: 3,
		timeout:  5 * time.Second,
	}
	if ts, ok := store.(TxStore); ok {
		e.txStore = ts
	}
	_, e.local = store.(LocalStore)
	for _, o := range opts {
		o(e)
	}
	e.now = e.clock.Now
	return e
}

// Tenant returns the tenant the executor reads from ctx (see WithTenant).
// Generated wrappers call it for a `tenant` key part; every key is already
// scoped by tenant, so such a part only makes an empty tenant ErrMissingKey.
func (e *Executor) Tenant(ctx context.Context) string { return e.tenant(ctx) }

func (e *Executor) token() Token {
	for {
		if t := Token(rand.Uint64()); t != 0 {
			return t
		}
	}
}

// EventKind says what happened to a call.
type EventKind uint8

const (
	// EventClaimed: the call claimed a free key and runs the method.
	EventClaimed EventKind = iota + 1
	// EventTakenOver: the call took over a lapsed lease and runs the method.
	EventTakenOver
	// EventCompleted: the outcome was stored.
	EventCompleted
	// EventReplayed: a stored outcome was replayed; the method did not run.
	EventReplayed
	// EventConflict: the key was reused with another payload.
	EventConflict
	// EventInProgress: another call holds the key.
	EventInProgress
	// EventReleased: a transient failure, panic or cancellation released
	// the key so that a retry executes again.
	EventReleased
	// EventLeaseLost: the outcome could not be stored because another worker
	// took the key over.
	EventLeaseLost
	// EventStoreError: a store call failed (Err says which and why).
	EventStoreError
	// EventStoreRetry: a store call after the method failed and is retried.
	EventStoreRetry
)

var eventNames = [...]string{"", "claimed", "taken_over", "completed", "replayed", "conflict",
	"in_progress", "released", "lease_lost", "store_error", "store_retry"}

// String returns the event's name in snake case.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + itoa(int64(k)) + ")"
}

// Event is what the observer is told.
type Event struct {
	Kind EventKind
	Key  Key
	// Elapsed is the time since the call entered the executor.
	Elapsed time.Duration
	// Err is the error behind the event, if any.
	Err error
}

// LogEvents returns an observer that logs each event to l: store errors at
// Error, lease losses and releases at Warn, the rest at Debug.
func LogEvents(l *slog.Logger) func(Event) {
	return func(ev Event) {
		level := slog.LevelDebug
		switch ev.Kind {
		case EventStoreError:
			level = slog.LevelError
		case EventLeaseLost, EventReleased, EventStoreRetry:
			level = slog.LevelWarn
		}
		attrs := []slog.Attr{
			slog.String("event", ev.Kind.String()),
			slog.String("op", ev.Key.Op),
			slog.String("tenant", ev.Key.Tenant),
			slog.String("key", ev.Key.Text),
			slog.Duration("elapsed", ev.Elapsed),
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.Any("err", ev.Err))
		}
		l.LogAttrs(context.Background(), level, "idem", attrs...)
	}
}
