// Package memstore is the embedded idempotency store: records live in this
// process's memory, sharded by key, and expire on the store's clock.
//
// It is the default for tests, demos and single-instance services. Its
// guarantee ends with the process: a restart forgets every key, and two
// instances do not see each other's keys. Use pgstore (or tiered) when
// several instances serve the same keys or money moves.
//
// # Bound
//
// A Store holds at most DefaultMaxRecords records and DefaultMaxBytes bytes
// of records (WithMaxRecords, WithMaxBytes), so that clients sending fresh
// keys cannot grow the process's memory without limit. A record costs
// RecordOverhead bytes plus the lengths of its outcome's body, error code,
// error message and metadata (tenants, operations and key parts are not
// kept: a record is found by the key's 32-byte ID).
//
// When a new claim would pass a bound, the store first removes every
// expired record, and if that does not make room it refuses the claim with
// an error wrapping idem.ErrStoreFull: the method is not called, and the
// caller may retry later. A PROCESSING record or a record inside its TTL is
// never dropped to make room (dropping one would let a retry execute the
// method a second time). Everything else goes on while the store is full:
// retries are replayed, held keys answer as usual, and outcomes are stored
// (an outcome may take the bytes past WithMaxBytes by its own size: refusing
// it would turn a decided call into a second execution). Len and Bytes
// report the store's size, for metrics.
package memstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
	"github.com/idemgen/idemgen/runtime/idem"
)

const shardCount = 64

// Every sweepEvery-th claim of a shard inspects sweepBatch of its records
// for expiry, so that memory held by expired keys stays bounded without a
// goroutine: two records per claim on average, paying for the start of a
// map iteration once per batch instead of once per claim. A shard that
// cannot hold an expired record (its clock is before shard.soonest) is
// not swept: then a claim pays one comparison.
const (
	sweepEvery = 16
	sweepBatch = 2 * sweepEvery
)

const (
	// DefaultMaxRecords is the number of records a Store holds at most
	// when WithMaxRecords is not given: about 200 MB of heap for records
	// without outcomes (see RecordOverhead).
	DefaultMaxRecords = 1_000_000
	// DefaultMaxBytes is the size of records a Store holds at most when
	// WithMaxBytes is not given.
	DefaultMaxBytes = 1 << 30
	// RecordOverhead is what a record counts against WithMaxBytes besides
	// its outcome's bytes: an upper bound of the heap a record costs (the
	// record, its map entry and the map's spare capacity), measured on
	// amd64 at 127 bytes for 50,000 records, more when the maps are
	// freshly grown (TestMemoryPerRecord checks it).
	RecordOverhead = 256
)

// Store is an in-memory idem.Store, safe for concurrent use.
type Store struct {
	clock      func() time.Time // WithClock's clock; nil: the monotonic clock
	base       time.Time        // instant 0 of the store's clock (see now)
	anchor     sync.Once        // sets base from WithClock's clock, at its first reading
	maxRecords int64
	maxBytes   int64
	records    atomic.Int64 // records held, expired ones not yet removed included
	bytes      atomic.Int64 // their size, by recordSize
	shards     [shardCount]shard
}

type shard struct {
	mu     sync.Mutex
	recs   map[[32]byte]*record
	claims uint32 // claims since the last sweep
	// soonest is at or before the expiry of every record in the shard
	// (math.MaxInt64 when there is none): until the clock reaches it,
	// nothing in the shard has expired and claims do not sweep. Every
	// expiry set lowers it; a sweep that saw the whole shard sets it to
	// the earliest expiry it kept.
	soonest int64
}

type record struct {
	fp         idem.Fingerprint
	token      idem.Token
	scheme     uint32
	status     idem.Status
	leaseUntil int64 // instants of the store's clock, see Store.now
	expiresAt  int64
	out        idem.Outcome
}

// size is what r counts against WithMaxBytes.
func (r *record) size() int64 {
	return RecordOverhead + outcomeLen(r.out)
}

func outcomeLen(out idem.Outcome) int64 {
	return int64(len(out.Body) + len(out.ErrCode) + len(out.ErrMessage) + len(out.Meta))
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (default time.Now); tests pass a fake one
// to expire leases and records without sleeping. The store keeps instants
// as offsets from the clock's first reading in a store call (not at New,
// so that a fake clock may be set after New), which holds for readings
// within about 290 years of it.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithMaxRecords bounds the number of records the store holds (default
// DefaultMaxRecords); see the package documentation for what happens when
// it is reached. New panics if n is not positive.
func WithMaxRecords(n int) Option {
	return func(s *Store) {
		if n <= 0 {
			panic(fmt.Sprintf("memstore: WithMaxRecords(%d): the bound must be positive", n))
		}
		s.maxRecords = int64(n)
	}
}

// WithMaxBytes bounds the size of the records the store holds (default
// DefaultMaxBytes), counted as RecordOverhead per record plus its outcome's
// bytes; see the package documentation for what happens when it is reached.
// New panics if b is not positive.
func WithMaxBytes(b int64) Option {
	return func(s *Store) {
		if b <= 0 {
			panic(fmt.Sprintf("memstore: WithMaxBytes(%d): the bound must be positive", b))
		}
		s.maxBytes = b
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{maxRecords: DefaultMaxRecords, maxBytes: DefaultMaxBytes}
	for i := range s.shards {
		s.shards[i].recs = make(map[[32]byte]*record)
		s.shards[i].soonest = math.MaxInt64
	}
	for _, o := range opts {
		o(s)
	}
	if s.clock == nil {
		s.base = time.Now()
	}
	return s
}

// now reads the store's clock: nanoseconds since s.base. The default clock
// is the monotonic one, read once (time.Since of an instant that carries a
// monotonic reading does not read the wall clock), as time.Time's own
// comparisons would use it.
func (s *Store) now() int64 {
	if s.clock == nil {
		return int64(time.Since(s.base))
	}
	t := s.clock()
	s.anchor.Do(func() { s.base = t })
	return int64(t.Sub(s.base))
}

// after returns the instant d after now, saturating instead of overflowing
// for a duration of centuries.
func after(now int64, d time.Duration) int64 {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

// expireAt sets r's expiry, keeping sh.soonest at or before it. The
// shard's lock is held.
func (sh *shard) expireAt(r *record, at int64) {
	r.expiresAt = at
	sh.soonest = min(sh.soonest, at)
}

func (s *Store) shard(k idem.Key) *shard { return &s.shards[k.ID[0]%shardCount] }

// remove deletes the record of id from sh. The shard's lock is held.
func (s *Store) remove(sh *shard, id [32]byte, r *record) {
	delete(sh.recs, id)
	s.records.Add(-1)
	s.bytes.Add(-r.size())
}

// reserve counts a new record of size bytes, if it fits both bounds.
func (s *Store) reserve(size int64) bool {
	if s.records.Add(1) > s.maxRecords {
		s.records.Add(-1)
		return false
	}
	if s.bytes.Add(size) > s.maxBytes {
		s.bytes.Add(-size)
		s.records.Add(-1)
		return false
	}
	return true
}

// live returns the record of id if it exists and has not expired, removing
// an expired one. The shard's lock is held.
func (s *Store) live(sh *shard, id [32]byte, now int64) *record {
	r, ok := sh.recs[id]
	if !ok {
		return nil
	}
	if now >= r.expiresAt {
		s.remove(sh, id, r)
		return nil
	}
	return r
}

func checkKey(k idem.Key) error {
	if len(k.Tenant) > idem.MaxTenantLen {
		return fmt.Errorf("tenant of %d bytes (at most %d): %w", len(k.Tenant), idem.MaxTenantLen, idem.ErrTooLarge)
	}
	if len(k.Op) > idem.MaxOpLen {
		return fmt.Errorf("operation name of %d bytes (at most %d): %w", len(k.Op), idem.MaxOpLen, idem.ErrTooLarge)
	}
	return nil
}

func checkOutcome(out idem.Outcome) error {
	if out.Status != idem.StatusSucceeded && out.Status != idem.StatusFailedFinal {
		return fmt.Errorf("outcome status %v is not final", out.Status)
	}
	if n := outcomeLen(out); n > idem.MaxOutcomeLen {
		return fmt.Errorf("outcome of %d bytes (at most %d): %w", n, idem.MaxOutcomeLen, idem.ErrTooLarge)
	}
	return nil
}

// errorf wraps err with the store's name, the operation and the key's ID.
func errorf(op string, k idem.Key, err error) error {
	return fmt.Errorf("memstore: %s %s: %w", op, k.Hex(), err)
}

// Claim implements idem.Store. A claim repeated by the token that holds the
// PROCESSING record (a retry after a lost reply) is claimed again, with its
// lease set afresh from now (never beyond the record's expiry). A claim
// that needs a new record when the store is full is refused with an error
// wrapping idem.ErrStoreFull, after expired records were removed.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (c idem.Claim, err error) {
	if err := checkKey(req.Key); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	for swept := false; ; swept = true {
		if !s.claim(ctx, &req, &c) {
			return c, nil
		}
		if swept {
			return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("%d records, %d bytes (bounds %d records, %d bytes): %w",
				s.records.Load(), s.bytes.Load(), s.maxRecords, s.maxBytes, idem.ErrStoreFull))
		}
		s.sweepAll()
	}
}

// claim is one attempt of Claim under the shard's lock, answering in c
// (written in place: a Claim is large to copy); full is true when a new
// record did not fit.
func (s *Store) claim(ctx context.Context, req *idem.ClaimRequest, c *idem.Claim) (full bool) {
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	if now >= sh.soonest {
		if sh.claims++; sh.claims >= sweepEvery {
			sh.claims = 0
			s.sweep(sh, now, sweepBatch)
		}
	}
	r := s.live(sh, req.Key.ID, now)
	switch {
	case r == nil:
		r = &record{
			fp: req.Fingerprint, token: req.Token, scheme: req.Scheme, status: idem.StatusProcessing,
			leaseUntil: after(now, req.Lease),
		}
		if !s.reserve(r.size()) {
			return true
		}
		sh.expireAt(r, after(now, req.TTL))
		sh.recs[req.Key.ID] = r
		c.Claimed = true
		return false
	case r.status == idem.StatusProcessing && r.token == req.Token && r.fp == req.Fingerprint:
		// The record still holds this token, so nobody took the key over:
		// the retry gets a fresh lease for the method it is about to start.
		r.leaseUntil = min(after(now, req.Lease), r.expiresAt)
		c.Claimed = true
		return false
	case r.status == idem.StatusProcessing && now >= r.leaseUntil &&
		(r.fp == req.Fingerprint || mutant.On(ctx, mutant.TakeoverWithoutFingerprint)): // a known mistake, for the simulator's tests
		r.token = req.Token
		r.scheme = req.Scheme
		r.leaseUntil = after(now, req.Lease)
		sh.expireAt(r, after(now, req.TTL))
		c.Claimed, c.TakenOver = true, true
		return false
	}
	rec := &c.Record
	rec.Status, rec.Fingerprint, rec.Scheme, rec.Token, rec.Outcome = r.status, r.fp, r.scheme, r.token, r.out
	if r.status == idem.StatusProcessing {
		rec.LeaseLeft = time.Duration(max(r.leaseUntil-now, 0))
	}
	return false
}

// Complete implements idem.Store. Complete repeated by the token that
// stored the outcome (a retry after a lost reply) answers nil and keeps the
// stored outcome.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := checkOutcome(out); err != nil {
		return errorf("complete", key, err)
	}
	if err := ctx.Err(); err != nil {
		return errorf("complete", key, err)
	}
	// out's slices are the store's to keep (idem.Store.Complete): no copy.
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := s.live(sh, key.ID, now)
	switch {
	case r == nil:
		return errorf("complete", key, idem.ErrLeaseLost)
	case r.token == token && r.status == idem.StatusProcessing: // the common case, before the context's values are asked
	case mutant.On(ctx, mutant.CompleteWithoutFencing): // a known mistake, for the simulator's tests
	case r.token != token:
		return errorf("complete", key, idem.ErrLeaseLost)
	case r.status != idem.StatusProcessing:
		return nil // this token's outcome is stored already
	}
	s.bytes.Add(outcomeLen(out) - outcomeLen(r.out))
	r.status = out.Status
	r.out = out
	r.leaseUntil = 0
	sh.expireAt(r, after(now, ttl))
	return nil
}

// Release implements idem.Store. Releasing a record that is not there (it
// was released already, or expired) answers nil; a final record is never
// released.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	if err := ctx.Err(); err != nil {
		return errorf("release", key, err)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := s.live(sh, key.ID, s.now())
	switch {
	case r == nil:
		return nil
	case r.status != idem.StatusProcessing || r.token != token:
		return errorf("release", key, idem.ErrLeaseLost)
	}
	s.remove(sh, key.ID, r)
	return nil
}

// Renew implements idem.Renewer: the lease of the PROCESSING record holding
// token ends lease from now, or at the record's expiry if that is sooner.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return errorf("renew", key, fmt.Errorf("lease %v is not positive", lease))
	}
	if err := ctx.Err(); err != nil {
		return errorf("renew", key, err)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := s.live(sh, key.ID, now)
	if r == nil || r.status != idem.StatusProcessing || r.token != token {
		return errorf("renew", key, idem.ErrLeaseLost)
	}
	r.leaseUntil = min(after(now, lease), r.expiresAt)
	return nil
}

// Len returns the number of records held, expired ones not yet removed
// included: the figure WithMaxRecords bounds.
func (s *Store) Len() int { return int(s.records.Load()) }

// Bytes returns the size of the records held, expired ones not yet removed
// included, as WithMaxBytes counts it.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Sweep removes at most limit expired records and returns how many it
// removed; with limit <= 0 it removes every expired record (the meaning
// every store shares, see idem.Sweepable). A caller that sweeps in bounded
// steps calls it again while it returns limit. Each shard is locked only
// while it is swept, so claims on other shards go on.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = -1 // sweepExpired: all
	}
	removed := 0
	for i := range s.shards {
		if removed == limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("memstore: sweep: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		removed += s.sweepExpired(sh, s.now(), limit-removed)
		sh.mu.Unlock()
	}
	return removed, nil
}

// sweepAll removes every expired record, one shard at a time.
func (s *Store) sweepAll() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepExpired(sh, s.now(), -1)
		sh.mu.Unlock()
	}
}

// sweep inspects up to n records (in Go's random map order) and removes the
// expired ones; when that was the whole shard, sh.soonest becomes the
// earliest expiry kept. The shard's lock is held.
func (s *Store) sweep(sh *shard, now int64, n int) {
	soonest := int64(math.MaxInt64)
	for id, r := range sh.recs {
		if n == 0 {
			return
		}
		n--
		if now >= r.expiresAt {
			s.remove(sh, id, r)
		} else {
			soonest = min(soonest, r.expiresAt)
		}
	}
	sh.soonest = soonest
}

// sweepExpired removes up to limit expired records (all when limit < 0);
// when it saw the whole shard, sh.soonest becomes the earliest expiry kept.
// The shard's lock is held.
func (s *Store) sweepExpired(sh *shard, now int64, limit int) int {
	n := 0
	soonest := int64(math.MaxInt64)
	for id, r := range sh.recs {
		if n == limit {
			return n
		}
		if now >= r.expiresAt {
			s.remove(sh, id, r)
			n++
		} else {
			soonest = min(soonest, r.expiresAt)
		}
	}
	sh.soonest = soonest
	return n
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Local implements idem.LocalStore: the store never blocks on I/O.
func (s *Store) Local() bool { return true }

// Seed implements idem.Seeder: it stores a completed record decided by
// another store (tiered uses it to fill and repair its fast tier), with the
// record's fingerprint, scheme, token and outcome. A final record already
// present is kept. A new record that does not fit the bounds is refused
// with an error wrapping idem.ErrStoreFull.
func (s *Store) Seed(ctx context.Context, key idem.Key, rec idem.Record, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return errorf("seed", key, err)
	}
	out := rec.Outcome
	if err := checkOutcome(out); err != nil {
		return errorf("seed", key, err)
	}
	if rec.Status != out.Status {
		return errorf("seed", key, fmt.Errorf("record status %v differs from its outcome's %v", rec.Status, out.Status))
	}
	if err := ctx.Err(); err != nil {
		return errorf("seed", key, err)
	}
	out.Body = clone(out.Body)
	out.Meta = clone(out.Meta)
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	old := s.live(sh, key.ID, now)
	if old != nil && old.status != idem.StatusProcessing {
		return nil
	}
	r := &record{fp: rec.Fingerprint, token: rec.Token, scheme: rec.Scheme, status: out.Status, out: out}
	if old != nil {
		s.remove(sh, key.ID, old)
	}
	if !s.reserve(r.size()) {
		return errorf("seed", key, errSeedFull)
	}
	sh.expireAt(r, after(now, ttl))
	sh.recs[key.ID] = r
	return nil
}

var errSeedFull = fmt.Errorf("no room for the record: %w", idem.ErrStoreFull)

var (
	_ idem.LocalStore = (*Store)(nil)
	_ idem.Renewer    = (*Store)(nil)
	_ idem.Seeder     = (*Store)(nil)
)
