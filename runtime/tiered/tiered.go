// Package tiered is an idempotency store in two tiers: a fast store (Redis,
// runtime/redisstore) in front of a durable one (PostgreSQL, runtime/pgstore).
//
// Redis answers the common duplicate, a retry of a call that already
// finished, in one round trip. Redis can lose a record it acknowledged (a
// failover before replication, a restart without persistence, eviction under
// maxmemory); the durable store's unique index cannot. So the durable store
// decides every claim, and the fast store is only ever trusted for what the
// durable store already holds:
//
//   - Claim first asks the fast store. A final outcome (SUCCEEDED or
//     FAILED_FINAL) found there is returned at once: it got there only after
//     the durable store accepted it (or was copied from the durable store).
//     Anything else (no record, a claim, a PROCESSING record) is settled by
//     a Claim on the durable store, with the same request and token.
//   - Complete, Release and Renew go to the durable store first; its answer
//     is the answer (ErrLeaseLost included: fencing is the durable store's).
//     The fast store is then updated with the same token.
//   - A final record found in the durable store but missing (or stale) in
//     the fast store is written back into the fast store (EventRepaired),
//     when the fast store implements idem.Seeder.
//
// # Guarantee
//
// A method runs only under a claim that the durable store granted, so the
// tiered store executes a method at most once per live key exactly as far as
// the durable store does, whatever the fast store loses or says. Losing the
// fast store costs latency, never idempotency.
//
// Each fast-store call runs under the fast timeout: on the caller's goroutine
// when the fast store returns promptly at its context's deadline (an
// idem.BoundedStore that says so: redisstore on a go-redis client with
// ContextTimeoutEnabled, or with read and write timeouts no longer than the
// fast timeout; see WithInlineFastCalls), and otherwise on a goroutine of
// its own that the store stops waiting for. Build the Redis client with
// ContextTimeoutEnabled: true: the hand-off to another goroutine costs
// every call, replays included (measured +50 µs on a replay of about 35 µs
// on a loaded 2-core machine).
//
// A full fast store (a Redis at its maxmemory under noeviction refuses new
// records with idem.ErrStoreFull) is not failing: the call goes on with the
// durable store, the observer is told (EventFastFull), and the fast store
// keeps answering the replays it holds; the durable store's own limits
// decide whether a new key is refused. A tenant's share (redisstore's
// WithTenantShare) on the fast store is the same: the durable store
// decides.
//
// When the fast store fails or does not answer within the fast timeout
// (WithFastTimeout), the call goes on with the durable store alone, the
// observer is told (WithObserver), and the fast store is skipped for a
// cool-down (WithCooldown) before it is tried again. When the durable store
// fails, Claim fails with an error wrapping ErrDurable: the method is not run
// unprotected.
//
// Every operation is idempotent for its caller's own token as far as both
// tiers are (redisstore and pgstore are): a Claim repeated by the token that
// holds the claim is claimed again (the durable store sets its lease
// afresh), a Complete repeated by the token whose
// outcome is stored answers nil, and a Release of a record that is not there
// answers nil. Tenants, operations and outcomes larger than the limits every
// store accepts (idem.MaxTenantLen, idem.MaxOpLen, idem.MaxOutcomeLen) are
// refused with an error wrapping idem.ErrTooLarge before either tier is
// called. The tiered store has no Sweep: sweep the durable store (Redis
// expires its records itself).
//
// # Two modes
//
// New's Store uses the durable store through Claim, Complete and Release
// (pgstore.New, lease mode): the claim, the method's own writes and the
// outcome are three commits. NewTx's TxStore is an idem.TxStore on a
// durable store in transactional mode (pgstore.NewTx): the claim, the
// method's writes and the outcome are one durable transaction, committed
// once, as pgstore alone does in that mode; the fast store is used the same
// way in both (a replay found there never opens a transaction).
//
// In NewTx's TxStore, a replay found in the fast store is answered from there without opening a
// transaction. Everything else is settled by the durable store's ClaimTx: a
// duplicate of a call in flight waits there on the claimed row (up to the
// method's wait) and sees its committed outcome. When the durable store
// grants the claim, the returned Txn commits the outcome in the durable
// store first, then stores it in the fast store under the claim's token,
// best effort; its Release rolls the durable transaction back and deletes
// the fast store's PROCESSING record of the claim.
//
// # Limits
//
// The durable store's guarantee is the limit (with pgstore: while the row
// lives, which is the record's TTL). A record repaired into the fast store
// gets min(the claim's TTL, WithRepairTTL), since a Record does not say how
// long the durable record has left: a repaired outcome may be replayed from
// the fast store for up to that long after the durable record expired. A
// repaired record keeps the durable record's fingerprint, scheme, token
// and outcome.
//
// Store outages: once the method ran, the executor keeps its outcome and
// retries Complete for as long as the claim can be live, so a PostgreSQL
// restart shorter than the lease loses nothing and runs nothing twice (a
// Redis outage costs nothing: the durable store decides). In lease mode, a
// store outage longer than the lease after the method ran can run it again;
// transactional mode cannot.
package tiered

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

const (
	// DefaultFastTimeout bounds each fast-store call (WithFastTimeout).
	DefaultFastTimeout = 100 * time.Millisecond
	// DefaultCooldown is how long a failing fast store is skipped
	// (WithCooldown).
	DefaultCooldown = time.Second
	// DefaultRepairTTL caps the TTL of a repaired record (WithRepairTTL).
	DefaultRepairTTL = 5 * time.Minute
)

// ErrDurable is wrapped, next to the cause, by every error of the durable
// store other than idem.ErrLeaseLost: the call could not be protected and was
// not executed (Claim), or its outcome could not be stored (Complete).
var ErrDurable = errors.New("tiered: durable store failed")

// EventKind says what happened to the fast tier.
type EventKind uint8

const (
	// EventFastError: a call to the fast store failed or timed out (Err);
	// the call went on with the durable store alone.
	EventFastError EventKind = iota + 1
	// EventDegraded: after an error the fast store is skipped for the
	// cool-down; calls are served by the durable store alone.
	EventDegraded
	// EventRecovered: the fast store answered again after being skipped.
	EventRecovered
	// EventRepaired: a final record present in the durable store but not in
	// the fast store was written into the fast store.
	EventRepaired
	// EventFastFull: the fast store refused a new record, being full (an
	// error wrapping idem.ErrStoreFull: a Redis at its maxmemory under
	// noeviction, or a tenant's share); the call went on with the durable
	// store, and the fast store is not skipped: it still answers the
	// replays it holds.
	EventFastFull
)

var eventNames = [...]string{"", "fast_error", "degraded", "recovered", "repaired", "fast_full"}

// String returns the event's name in snake case.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is what the observer is told.
type Event struct {
	Kind EventKind
	// Op is the store call: "claim", "complete", "release", "renew" or
	// "seed".
	Op  string
	Key idem.Key
	// Err is the fast store's error (EventFastError, EventDegraded,
	// EventFastFull).
	Err error
}

// StoreOperation returns ev.Op (idem.StoreEvent).
func (ev Event) StoreOperation() string { return ev.Op }

// StoreEventName returns ev.Kind's name (idem.StoreEvent).
func (ev Event) StoreEventName() string { return ev.Kind.String() }

var _ idem.StoreEvent = Event{}

// Store is an idem.Store in two tiers. It is safe for concurrent use.
type Store struct {
	fast      idem.Store
	seeder    idem.Seeder // fast as a Seeder, or nil
	durable   idem.Store
	timeout   time.Duration
	cooldown  time.Duration
	repairTTL time.Duration
	inline    bool
	inlineSet bool // by WithInlineFastCalls or WithDetachedFastCalls
	observe   func(Event)
	now       func() time.Time
	// downUntil is the UnixNano instant until which the fast store is
	// skipped; 0 while it is up.
	downUntil atomic.Int64
}

// Option configures a Store.
type Option func(*Store)

// WithFastTimeout bounds each call to the fast store (default
// DefaultFastTimeout). A call that takes longer counts as a fast-store error:
// the store stops waiting for it and goes on with the durable store, even if
// the Redis client's own timeouts are longer.
func WithFastTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// WithInlineFastCalls calls the fast store on the caller's goroutine, with
// the fast timeout as its context deadline, instead of on a goroutine of its
// own that the store stops waiting for at the timeout. It saves a goroutine
// hand-off per fast call (visible on replays), and is safe only when the fast
// store returns promptly once its context's deadline passes: for redisstore,
// a go-redis client with ContextTimeoutEnabled: true (or read and write
// timeouts no longer than the fast timeout).
//
// It is the default when the fast store says it is safe: when it is an
// idem.BoundedStore (redisstore.Store is) whose BoundedBy returns true for
// the fast timeout. Use it to force inline calls on a fast store
// that cannot tell, and WithDetachedFastCalls to force the goroutine.
func WithInlineFastCalls() Option { return func(s *Store) { s.inline, s.inlineSet = true, true } }

// WithDetachedFastCalls always calls the fast store on a goroutine of its
// own that the store stops waiting for at the fast timeout, even when the
// fast store says it returns promptly at its deadline (see
// WithInlineFastCalls): for clients whose hooks or dialers may block.
func WithDetachedFastCalls() Option { return func(s *Store) { s.inline, s.inlineSet = false, true } }

// WithCooldown sets how long the fast store is skipped after an error
// (default DefaultCooldown); 0 tries it on every call.
func WithCooldown(d time.Duration) Option { return func(s *Store) { s.cooldown = d } }

// WithRepairTTL caps the TTL of a record repaired into the fast store
// (default DefaultRepairTTL); see the package documentation.
func WithRepairTTL(d time.Duration) Option { return func(s *Store) { s.repairTTL = d } }

// WithObserver sets a function told about fast-store errors, degradation,
// recovery and repairs, synchronously; it must be fast and safe for
// concurrent use.
func WithObserver(f func(Event)) Option { return func(s *Store) { s.observe = f } }

// WithClock sets the clock of the cool-down (time.Now by default), as the
// stores' WithClock options do; tests pass a virtual one. Leases and expiry
// are the stores' own.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns a Store with fast in front of durable. Only the durable store
// decides claims and fences outcomes; records are repaired into fast only if
// it implements idem.Seeder (redisstore does).
func New(fast, durable idem.Store, opts ...Option) *Store {
	s := &Store{
		fast:      fast,
		durable:   durable,
		timeout:   DefaultFastTimeout,
		cooldown:  DefaultCooldown,
		repairTTL: DefaultRepairTTL,
		observe:   func(Event) {},
		now:       time.Now,
	}
	s.seeder, _ = fast.(idem.Seeder)
	for _, o := range opts {
		o(s)
	}
	if b, ok := fast.(idem.BoundedStore); ok && !s.inlineSet {
		s.inline = b.BoundedBy(s.timeout)
	}
	return s
}

func final(st idem.Status) bool {
	return st == idem.StatusSucceeded || st == idem.StatusFailedFinal
}

// Claim implements idem.Store: a final outcome in the fast store is returned
// from there; everything else is decided by the durable store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	fc, fastErr, err := s.fastClaim(ctx, req)
	if err != nil || fastErr == nil && !fc.Claimed && final(fc.Record.Status) {
		return fc, err
	}
	dc, err := s.durable.Claim(ctx, req)
	return s.settle(ctx, req, fc, fastErr, dc, err)
}

// fastClaim checks the key's sizes and asks the fast store: a final record
// it returns (fastErr nil, !Claimed) is the answer.
func (s *Store) fastClaim(ctx context.Context, req idem.ClaimRequest) (fc idem.Claim, fastErr, err error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, nil, errorf("claim", req.Key, err)
	}
	if !s.fastUp() {
		return idem.Claim{}, errSkipped, nil
	}
	fc, fastErr = fastDo(ctx, s, fastCall{op: "claim", req: req}, fastClaimCall)
	return fc, fastErr, nil
}

// settle ends a claim after the durable store answered dc (or err): it
// releases a fast record the durable store did not grant, and repairs a
// final record the fast store did not return.
func (s *Store) settle(ctx context.Context, req idem.ClaimRequest, fc idem.Claim, fastErr error, dc idem.Claim, err error) (idem.Claim, error) {
	fastClaimed := fastErr == nil && fc.Claimed // the fast record holds req.Token
	if err != nil {
		if fastClaimed {
			s.fastRelease(ctx, req.Key, req.Token)
		}
		return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("%w: %w", ErrDurable, err))
	}
	if dc.Claimed || fastErr != nil {
		return dc, nil
	}
	// The durable store holds a record the fast store did not return.
	if final(dc.Record.Status) && s.seeder != nil {
		c := fastCall{op: "seed", req: req, rec: dc.Record, d: min(req.TTL, s.repairTTL)}
		if _, err := fastDo(ctx, s, c, fastSeedCall); err == nil {
			s.observe(Event{Kind: EventRepaired, Op: "claim", Key: req.Key})
		}
	} else if fastClaimed {
		s.fastRelease(ctx, req.Key, req.Token)
	}
	return dc, nil
}

// Complete implements idem.Store: the durable store first (its ErrLeaseLost
// is the answer), then the fast store with the same token.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if n := idem.OutcomeLen(&out); n > idem.MaxOutcomeLen {
		return errorf("complete", key, fmt.Errorf("outcome of %d bytes (at most %d): %w", n, idem.MaxOutcomeLen, idem.ErrTooLarge))
	}
	if err := s.durable.Complete(ctx, key, token, out, ttl); err != nil {
		return s.durableErr("complete", key, err)
	}
	s.fastComplete(ctx, key, token, out, ttl)
	return nil
}

// fastComplete stores the outcome the durable store accepted in the fast
// store too, best effort: ErrLeaseLost here means the fast store lost the
// claim or holds a stale record, which the next Claim repairs from the
// durable store.
func (s *Store) fastComplete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) {
	if !s.fastUp() {
		return
	}
	c := fastCall{op: "complete", req: idem.ClaimRequest{Key: key}, token: token, out: out, d: ttl}
	_, _ = fastDo(ctx, s, c, fastCompleteCall)
}

// Release implements idem.Store: the durable store first (its ErrLeaseLost
// is the answer), then the fast store's record of the same token, if any.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	err := s.durable.Release(ctx, key, token)
	s.fastRelease(ctx, key, token)
	if err != nil {
		return s.durableErr("release", key, err)
	}
	return nil
}

// ErrNoRenew is wrapped by Renew when the durable store does not implement
// idem.Renewer.
var ErrNoRenew = fmt.Errorf("tiered: the durable store cannot renew a lease: %w", errors.ErrUnsupported)

// Renew implements idem.Renewer: the durable store renews the lease (its
// ErrLeaseLost is the answer), then the fast store's record of the same
// token, best effort. It fails with an error wrapping ErrNoRenew when the
// durable store does not implement idem.Renewer.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	d, ok := s.durable.(idem.Renewer)
	if !ok {
		return errorf("renew", key, ErrNoRenew)
	}
	if err := d.Renew(ctx, key, token, lease); err != nil {
		return s.durableErr("renew", key, err)
	}
	if _, ok := s.fast.(idem.Renewer); ok && s.fastUp() {
		// A fast PROCESSING record is never trusted: renewing it only saves
		// a duplicate the round trip of taking it over.
		c := fastCall{op: "renew", req: idem.ClaimRequest{Key: key}, token: token, d: lease}
		_, _ = fastDo(ctx, s, c, fastRenewCall)
	}
	return nil
}

func (s *Store) durableErr(op string, key idem.Key, err error) error {
	if errors.Is(err, idem.ErrLeaseLost) {
		return errorf(op, key, err)
	}
	return errorf(op, key, fmt.Errorf("%w: %w", ErrDurable, err))
}

// errorf wraps err with the store's name, the operation and the key's ID,
// which it leaves out when err (a tier's error) names it already: a message
// names the key once.
func errorf(op string, k idem.Key, err error) error {
	if hex := k.Hex(); !strings.Contains(err.Error(), hex) {
		return fmt.Errorf("tiered: %s %s: %w", op, hex, err)
	}
	return fmt.Errorf("tiered: %s: %w", op, err)
}

// fastRelease deletes the fast record holding token, best effort: a fast
// PROCESSING record is never trusted, so one left behind costs nothing but
// a durable round trip.
func (s *Store) fastRelease(ctx context.Context, key idem.Key, token idem.Token) {
	if !s.fastUp() {
		return
	}
	_, _ = fastDo(ctx, s, fastCall{op: "release", req: idem.ClaimRequest{Key: key}, token: token}, fastReleaseCall)
}

var errSkipped = errors.New("tiered: fast store skipped")

// fastUp reports whether the fast store should be tried: it is up, or its
// cool-down has passed (then this call probes it).
func (s *Store) fastUp() bool {
	until := s.downUntil.Load()
	return until == 0 || s.now().UnixNano() >= until
}

type result[T any] struct {
	v   T
	err error
}

// fastCall is one call of the fast store: op names it, req.Key is its key,
// and the other fields are what its function (fastClaimCall…) passes on;
// d is the TTL of a complete or a seed and the lease of a renew. It is
// passed by value, so that a call on the caller's goroutine allocates
// nothing for it.
type fastCall struct {
	op    string
	req   idem.ClaimRequest
	token idem.Token
	out   idem.Outcome
	rec   idem.Record
	d     time.Duration
}

func fastClaimCall(ctx context.Context, s *Store, c fastCall) (idem.Claim, error) {
	return s.fast.Claim(ctx, c.req)
}

func fastSeedCall(ctx context.Context, s *Store, c fastCall) (struct{}, error) {
	return struct{}{}, s.seeder.Seed(ctx, c.req.Key, c.rec, c.d)
}

func fastCompleteCall(ctx context.Context, s *Store, c fastCall) (struct{}, error) {
	return struct{}{}, s.fast.Complete(ctx, c.req.Key, c.token, c.out, c.d)
}

func fastReleaseCall(ctx context.Context, s *Store, c fastCall) (struct{}, error) {
	return struct{}{}, s.fast.Release(ctx, c.req.Key, c.token)
}

func fastRenewCall(ctx context.Context, s *Store, c fastCall) (struct{}, error) {
	return struct{}{}, s.fast.(idem.Renewer).Renew(ctx, c.req.Key, c.token, c.d)
}

// fastDo runs f(c) on the fast store, bounded by the fast timeout even if
// f itself ignores its context (unless the calls are inline), and keeps
// the up/down state. idem.ErrLeaseLost and idem.ErrStoreFull are answers,
// not failures.
func fastDo[T any](ctx context.Context, s *Store, c fastCall, f func(context.Context, *Store, fastCall) (T, error)) (T, error) {
	fctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var r result[T]
	if s.inline {
		r.v, r.err = f(fctx, s, c)
	} else {
		done := make(chan result[T], 1)
		detached := c // only the detached call's copy escapes
		go func() {
			v, err := f(fctx, s, detached)
			done <- result[T]{v, err}
		}()
		select {
		case r = <-done:
		case <-fctx.Done():
			r.err = fmt.Errorf("tiered: fast store %s: no answer within %v: %w", c.op, s.timeout, fctx.Err())
		}
	}
	key := c.req.Key
	switch {
	case r.err == nil || errors.Is(r.err, idem.ErrLeaseLost) || errors.Is(r.err, idem.ErrStoreFull):
		if s.downUntil.Load() != 0 && s.downUntil.Swap(0) != 0 {
			s.observe(Event{Kind: EventRecovered, Op: c.op, Key: key})
		}
		if r.err != nil && !errors.Is(r.err, idem.ErrLeaseLost) {
			// A full fast store answers: it refused to grow. It is not
			// failing, and its replays are still worth asking for.
			s.observe(Event{Kind: EventFastFull, Op: c.op, Key: key, Err: r.err})
		}
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about the fast store.
	default:
		s.observe(Event{Kind: EventFastError, Op: c.op, Key: key, Err: r.err})
		if s.cooldown > 0 {
			until := max(s.now().Add(s.cooldown).UnixNano(), 1)
			if s.downUntil.Swap(until) == 0 {
				s.observe(Event{Kind: EventDegraded, Op: c.op, Key: key, Err: r.err})
			}
		}
	}
	return r.v, r.err
}

var (
	_ idem.Renewer = (*Store)(nil)
	_ idem.TxStore = (*TxStore)(nil)
)
