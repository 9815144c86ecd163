package idem

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
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
	// Op names the operation in the record key. The generator's default is
	// the method qualified by its package's import path
	// (example.com/shop/payments.Service.Capture); op= in the annotation
	// pins another. Two methods under one Op would share records, so an
	// Executor refuses a second Func under an Op it has run.
	Op string
	// Func is the fully qualified name of the wrapped method, e.g.
	// example.com/shop/payments.(*Service).Capture. Generated code sets
	// it; it is empty for hand-written callers, which are not checked. An
	// Executor that has run a Method with one non-empty Func under an Op
	// refuses another non-empty Func under that Op (ErrMisconfigured),
	// before anything is claimed.
	Func string
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
	// Renew turns lease renewal on for this method (the annotation's
	// renew), whatever the executor's WithRenewal says; see WithRenewal.
	// Do returns ErrMisconfigured when the store can neither renew
	// (idem.Renewer) nor hold claims in a transaction (idem.TxStore).
	Renew bool
	// Stale, when not nil, is returned by every call: generated code sets
	// it to CheckLayout's result, an error wrapping ErrStaleWrapper when
	// the types of the method's hashed parameters are not those the
	// wrapper was generated for.
	Stale error
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
	json     bool // codec is JSONCodec: replays may skip its strict decoder (resulttype.go)
	clock    Clock
	now      func() time.Time // clock.Now
	system   bool             // clock is SystemClock: instant reads the monotonic clock alone
	base     time.Time        // time.Now() at NewExecutor, for instant
	observe  func(Event)      // nil: no observer, and no clock reads for it
	hook     CallHook         // WithCallHook (hook.go), or nil
	attempts int
	timeout  time.Duration
	local    bool    // the store is a LocalStore
	renewer  Renewer // the store, when it renews leases
	renew    bool    // WithRenewal(true)
	bad      string  // the first invalid option, for NewExecutor's panic
	tenancy  bool    // WithTenant or SingleTenant was given
	single   bool    // SingleTenant was given
	// ops maps each Op run with a non-empty Func to the first *Method
	// that ran it (checkOp).
	ops sync.Map
	// prepared maps each Method with a Func that passed checkOp to what
	// its calls need (prepare); preparing serializes its writers.
	prepared  atomic.Pointer[map[*Method]*methodCache]
	preparing sync.Mutex
}

// methodCache is what an executor keeps about a Method it ran (see
// prepare): that its op passed checkOp for this Func, and the result
// type's Meta.
type methodCache struct {
	op, fn string       // m.Op and m.Func when checked
	result reflect.Type // the result type whose Meta is meta
	meta   []byte       // resultMeta(result)
}

// maxPrepared bounds how many Methods an executor keeps prepared; beyond,
// calls are checked through the maps (a program that makes a Method with
// a Func per call, which generated code never does).
const maxPrepared = 4096

// prepare returns what ex needs of m for a call whose result type is
// result: nil when m's op passed checkOp, and the result type's Meta
// (resultMeta). For a Method with a Func (generated code's, one per
// wrapped method), the executor keeps both, so that its later calls cost an
// atomic load and a lookup by the Method's address instead of two
// sync.Map lookups (the op is a long string to hash); a Method whose Op or
// Func changed is checked again.
func (ex *Executor) prepare(m *Method, result reflect.Type) (meta []byte, err error) {
	if m.Func == "" {
		return resultMeta(result), nil // hand-written: no op to check
	}
	if p := ex.prepared.Load(); p != nil {
		if c := (*p)[m]; c != nil && c.result == result && c.op == m.Op && c.fn == m.Func {
			return c.meta, nil
		}
	}
	if err := ex.checkOp(m); err != nil {
		return nil, err
	}
	meta = resultMeta(result)
	ex.keepPrepared(m, &methodCache{op: m.Op, fn: m.Func, result: result, meta: meta})
	return meta, nil
}

// keepPrepared adds m's answer to ex.prepared (copied on write: readers
// take no lock).
func (ex *Executor) keepPrepared(m *Method, c *methodCache) {
	ex.preparing.Lock()
	defer ex.preparing.Unlock()
	var old map[*Method]*methodCache
	if p := ex.prepared.Load(); p != nil {
		old = *p
	}
	if len(old) >= maxPrepared {
		return
	}
	next := make(map[*Method]*methodCache, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[m] = c
	ex.prepared.Store(&next)
}

// invalid records the first invalid option.
func (ex *Executor) invalid(format string, args ...any) {
	if ex.bad == "" {
		ex.bad = "idem: " + fmt.Sprintf(format, args...)
	}
}

// Option configures an Executor. An invalid option (a lease that is not
// positive, a nil function) makes NewExecutor panic with a message that
// names it.
type Option func(*Executor)

// WithLease sets the default lease of a claim (default 30s); it must be
// positive. An annotation's lease= wins. The lease also bounds how long the
// executor keeps trying to store an outcome through a store outage after
// the method ran: in lease mode, a store outage longer than the lease
// after the method ran can run it again; transactional mode cannot.
func WithLease(d time.Duration) Option {
	return func(e *Executor) {
		if d <= 0 {
			e.invalid("WithLease(%v): lease must be > 0", d)
			return
		}
		e.lease = d
	}
}

// WithTenant sets the function that reads the tenant from a call's context.
// Records are scoped by tenant: tenant A's key never answers tenant B. A
// tenant longer than MaxTenantLen makes Do fail with ErrTooLarge. Exactly
// one of WithTenant and SingleTenant must be given to NewExecutor.
func WithTenant(f func(context.Context) string) Option {
	return func(e *Executor) {
		if f == nil {
			e.invalid("WithTenant(nil)")
			return
		}
		if e.single {
			e.invalid("WithTenant and SingleTenant both given: choose one tenancy")
			return
		}
		e.tenant = f
		e.tenancy = true
	}
}

// SingleTenant puts every caller of the executor in one key space (tenant
// ""): a call with another caller's key is answered with that caller's
// stored outcome. Say it where the executor is built, for a service that
// has one client or whose keys are already unique across clients; a
// multi-tenant service passes WithTenant instead. Exactly one of the two
// must be given to NewExecutor.
func SingleTenant() Option {
	return func(e *Executor) {
		if e.tenancy && !e.single {
			e.invalid("WithTenant and SingleTenant both given: choose one tenancy")
			return
		}
		e.single = true
		e.tenancy = true
	}
}

// WithCodec sets the codec of stored results (default JSONCodec).
func WithCodec(c Codec) Option {
	return func(e *Executor) {
		if c == nil {
			e.invalid("WithCodec(nil)")
			return
		}
		e.codec = c
	}
}

// Clock is the executor's source of time: it measures durations for the
// observer and paces every wait the executor makes (a duplicate waiting for a
// running call, backoff between store retries). Lease and expiry instants
// always come from the store's clock. Tests and simulations pass a virtual
// clock; the default is the system clock. A Clock that also has a method
// Go(fn func()) starts the executor's own goroutines (see goClock): a
// deterministic simulator learns of each one as it starts.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// A Clock that also has a method Go(fn func()) starts the executor's own
// goroutines (the lease renewal, the keeper of an outcome after its caller
// gave up, a Release sent again through an outage) by calling it from the
// goroutine that starts them, instead of a go statement: Go must run fn on
// a goroutine of its own. A deterministic simulator that schedules every
// goroutine so learns of each one as it starts (internal/sim), and never
// waits for one the executor did not start.
type goClock interface {
	Go(fn func())
}

// spawn runs fn on a goroutine of its own, through the clock's Go when it
// has one (see goClock).
func (ex *Executor) spawn(fn func()) {
	if g, ok := ex.clock.(goClock); ok {
		g.Go(fn)
		return
	}
	go fn()
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
func WithClock(c Clock) Option {
	return func(e *Executor) {
		if c == nil {
			e.invalid("WithClock(nil)")
			return
		}
		e.clock = c
	}
}

// WithObserver sets a function called once per notable event, synchronously
// (lease renewals report from their own goroutine); it must be fast and safe
// for concurrent use. nil means no observer.
func WithObserver(f func(Event)) Option { return func(e *Executor) { e.observe = f } }

// WithStoreTimeout bounds each store call made after the method ran (each
// attempt of Complete, Release, a renewal while the outcome is kept) and
// each lease renewal, which run detached from the caller's cancellation so
// that a client that gave up does not lose the outcome (default 5s); it
// must be positive. It bounds one attempt, not the whole: a Complete that
// fails because the store cannot be reached is tried again while the claim
// can be live (see Do).
func WithStoreTimeout(d time.Duration) Option {
	return func(e *Executor) {
		if d <= 0 {
			e.invalid("WithStoreTimeout(%v): timeout must be > 0", d)
			return
		}
		e.timeout = d
	}
}

// WithRenewal turns lease renewal on for every method (default off; a
// Method's Renew turns it on for that method alone): while the method runs,
// the executor renews its claim through the store's Renewer, so that only a
// stalled process, not a slow method, loses its key to a takeover. If a
// renewal finds the claim taken, the method's context is cancelled with the
// cause ErrLeaseLost and Do's error matches ErrLeaseLost. In transactional
// mode renewal does nothing; NewExecutor panics if renewal is on and the
// store is neither a Renewer nor a TxStore. See the package documentation,
// section Lease renewal.
func WithRenewal(on bool) Option { return func(e *Executor) { e.renew = on } }

// CanRenew reports whether the executor's claims can outlive their lease
// while a method runs: its store renews leases (Renewer) or holds claims in
// a transaction (TxStore). Setting Method.Renew is valid only then; a door
// that runs handlers of unknown length sets it when CanRenew is true.
func (ex *Executor) CanRenew() bool { return ex.renewer != nil || ex.txStore != nil }

// NewExecutor returns an Executor on store. If store implements TxStore, the
// claim, the method and the outcome run in one store transaction. Exactly
// one of WithTenant and SingleTenant must be given (see the package
// documentation, section Tenancy).
//
// NewExecutor panics, with a message naming the option, if store is nil, no
// tenancy or both were chosen, or an option is invalid (a lease or timeout
// that is not positive, a nil tenant function, codec or clock, renewal on a
// store that cannot renew): such a mistake is in the program, not in a
// request, as with http.ServeMux's invalid patterns.
func NewExecutor(store Store, opts ...Option) *Executor {
	if store == nil {
		panic("idem: NewExecutor: store is nil")
	}
	e := &Executor{
		store:    store,
		lease:    DefaultLease,
		tenant:   func(context.Context) string { return "" }, // SingleTenant
		codec:    JSONCodec{},
		clock:    SystemClock{},
		attempts: 3,
		timeout:  5 * time.Second,
	}
	if ts, ok := store.(TxStore); ok {
		e.txStore = ts
	}
	if l, ok := store.(LocalStore); ok {
		e.local = l.Local()
	}
	e.renewer, _ = store.(Renewer)
	for _, o := range opts {
		o(e)
	}
	if !e.tenancy {
		e.invalid("NewExecutor: no tenancy chosen: pass WithTenant(f) to scope records by the caller f " +
			"names, or SingleTenant() if every caller may be answered with another caller's stored " +
			"outcome when it sends that caller's key")
	}
	if e.renew && e.renewer == nil && e.txStore == nil {
		e.invalid("WithRenewal(true): the store (%T) does not implement idem.Renewer", store)
	}
	if e.bad != "" {
		panic(e.bad)
	}
	e.now = e.clock.Now
	_, e.system = e.clock.(SystemClock)
	e.base = time.Now()
	_, e.json = e.codec.(JSONCodec)
	return e
}

// instant is ex.now() for the instants a call compares with the clock
// later (until when its claim can be live): the clock's Now, or, with the
// system clock, the executor's start plus the monotonic time since, which
// is one read of the monotonic clock where time.Now reads the wall clock
// too. Its monotonic reading compares with time.Now's (Before, Sub); its
// wall reading may differ from time.Now's by the wall clock's adjustments,
// so it is never reported as a time of day.
func (ex *Executor) instant() time.Time {
	if ex.system {
		return ex.base.Add(time.Since(ex.base))
	}
	return ex.now()
}

// Tenant returns the tenant of a call on the executor with ctx: the
// context's (ContextWithTenant) or the WithTenant function's, "" when there
// is none or the two conflict (Do then fails with ErrMissingTenant or
// ErrTenantConflict). Generated wrappers call it for a `tenant` key part;
// every key is already scoped by tenant, so such a part adds nothing but its
// place in the key's text (an empty tenant fails the call either way, with
// ErrMissingTenant, which matches ErrMissingKey too).
func (ex *Executor) Tenant(ctx context.Context) string {
	s := lookup(ctx, fTenant)
	t, _ := ex.callTenant(ctx, &s)
	return t
}

func (ex *Executor) token() Token {
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
	// EventStoreError: a store call failed (Err says which and why). For
	// a Complete, the executor gave up: the claim's lease ended before the
	// store could be reached (a retry may run the method again), or the
	// store refused even the substitute outcome.
	EventStoreError
	// EventStoreRetry: a store call failed and is retried (a Claim whose
	// reply may have been lost, or a Complete the store did not take yet,
	// retried while the claim can be live).
	EventStoreRetry
	// EventOutcomeNotStored: the method ran but its outcome could not be
	// stored (Err says why); a final outcome with the code NotStoredCode
	// was stored instead, and retries get ErrOutcomeNotStored. (When an
	// earlier Complete whose reply was lost had stored the outcome, that
	// outcome stands: a store answers its token's repeated Complete with
	// success and keeps what it stored.)
	EventOutcomeNotStored
	// EventSchemeChanged: a retry's fingerprint was computed by another
	// fingerprint scheme than its record's (a deploy in between); it was
	// treated as the same payload instead of ErrPayloadMismatch.
	EventSchemeChanged
	// EventUndecodable: a stored result did not decode into the result type
	// (Err wraps ErrUndecodable).
	EventUndecodable
	// EventCanceled: the caller's context ended while the executor claimed
	// or waited; Err is the context's error. The caller's doing, not the
	// store's.
	EventCanceled
	// EventRenewed: the claim's lease was renewed while the method runs.
	EventRenewed
)

var eventNames = [...]string{"", "claimed", "taken_over", "completed", "replayed", "conflict",
	"in_progress", "released", "lease_lost", "store_error", "store_retry",
	"outcome_not_stored", "scheme_changed", "undecodable", "canceled", "renewed"}

// String returns the event's name in snake case.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
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

// LogEvents returns an observer that logs each event to l: store errors,
// outcomes not stored and undecodable records at Error; lease losses,
// releases and store retries at Warn; scheme changes at Info; the rest
// (a caller's own cancellation included) at Debug.
//
// The key's text and tenant may carry personal data: they are not logged,
// the key's hex ID is (key_id, as the stores' errors name it);
// LogEventsWithKeys logs them too.
func LogEvents(l *slog.Logger) func(Event) { return logEvents(l, false) }

func logEvents(l *slog.Logger, keys bool) func(Event) {
	return func(ev Event) {
		level := slog.LevelDebug
		switch ev.Kind {
		case EventStoreError, EventOutcomeNotStored, EventUndecodable:
			level = slog.LevelError
		case EventLeaseLost, EventReleased, EventStoreRetry:
			level = slog.LevelWarn
		case EventSchemeChanged:
			level = slog.LevelInfo
		}
		attrs := []slog.Attr{
			slog.String("event", ev.Kind.String()),
			slog.String("op", ev.Key.Op),
			slog.String("key_id", ev.Key.Hex()),
			slog.Duration("elapsed", ev.Elapsed),
		}
		if keys {
			attrs = append(attrs, slog.String("tenant", ev.Key.Tenant), slog.String("key", ev.Key.Text))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.Any("err", ev.Err))
		}
		l.LogAttrs(context.Background(), level, "idem", attrs...)
	}
}
