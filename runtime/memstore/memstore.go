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
// error message and metadata (a record is found by the key's 32-byte ID;
// key parts are not kept). Each shard interns its records' tenants and
// operations, for operators (see Lookup, List), and a tenant's share keeps
// a counter per tenant: each distinct pair of a shard, and each tenant's
// counter, counts NameOverhead bytes plus the names' lengths, and leaves
// the store with the last record that needs it, so that clients sending
// ever-new tenants or operations are bounded like those sending new keys.
//
// When a new claim would pass a bound, the store first removes up to 64
// expired records (the oldest, from the heads of its expiry queues: see
// below), and if that does not make room it refuses the claim with an error
// wrapping idem.ErrStoreFull: the method is not called, and the caller may
// retry later. A refusal costs about what a claim costs: it looks at no live
// record but the head of an expiry queue, however many the store holds, so
// a flood of fresh keys against a full store costs no more than the same
// flood against an empty one, and a store full of expired records admits
// each new claim by removing some, without a sweeper and without a stall. A PROCESSING record or a record inside its TTL is
// never dropped to make room (dropping one would let a retry execute the
// method a second time). Everything else goes on while the store is full:
// retries are replayed, held keys answer as usual, and outcomes are stored
// (an outcome may take the bytes past WithMaxBytes by its own size: refusing
// it would turn a decided call into a second execution). Len and Bytes
// report the store's size, for metrics.
//
// # Tenant share
//
// One tenant cannot fill the store for the others: a named tenant holds at
// most WithTenantShare records (by default a quarter of WithMaxRecords),
// and a new claim beyond it is refused for that tenant alone with a
// *idem.TenantQuotaError (which wraps idem.ErrStoreFull; idemhttp answers
// it with 429 instead of 503). The single key space of idem.SingleTenant
// (tenant "") is bounded by the store's bounds alone. See
// docs/decisions/tenant-share.md.
//
// # Expiry
//
// Each shard keeps its records in expiry queues, one per class of TTLs
// within a factor of 1.5: a record goes to the tail of its queue whenever
// its expiry is set (claim, takeover, Complete, Seed), so that with one TTL
// per class and a clock that does not go back a queue is in expiry order and
// its expired records are at its head. Each claim that finds its shard's
// earliest expiry passed removes up to two expired records, so memory held
// by expired keys stays bounded without a goroutine; Sweep removes them too.
package memstore

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

const shardCount = 64

// Each claim that finds its shard's earliest expiry passed removes up to
// expirePerClaim expired records from the heads of the shard's expiry
// queues, so that memory held by expired keys stays bounded without a
// goroutine. A claim that needs a new record when the store is full first
// removes up to reclaimBudget expired records, oldest first, from any shard
// (see reclaim). Both look at no live record besides the head of a queue.
const (
	expirePerClaim = 2
	reclaimBudget  = 64
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
	// NameOverhead is what the store counts against WithMaxBytes, besides
	// the names' lengths, for each tenant and operation pair a shard
	// interns (while a record of the shard has that pair) and for each
	// tenant's counter of the tenant share (while the tenant holds a
	// record): an upper bound of their heap (TestMemoryPerName checks it).
	NameOverhead = 160
	// DefaultTenantShareDivisor sets the tenant share when WithTenantShare
	// is not given: a tenant holds at most the record bound divided by it
	// (250,000 of the default 1,000,000), so that at least this many
	// tenants must flood the store before it is full for the others (see
	// docs/decisions/tenant-share.md).
	DefaultTenantShareDivisor = 4
)

// Store is an in-memory idem.Store, safe for concurrent use.
type Store struct {
	clock      func() time.Time // WithClock's clock; nil: the monotonic clock
	base       time.Time        // instant 0 of the store's clock (see now)
	anchor     sync.Once        // sets base from WithClock's clock, at its first reading
	maxRecords int64
	maxBytes   int64
	share      int64                    // WithTenantShare; -1 until New sets the default
	records    atomic.Int64             // records held, expired ones not yet removed included
	bytes      atomic.Int64             // their size, by recordSize
	cursor     atomic.Uint32            // the shard where the next reclaim starts
	tenants    sync.Map                 // tenant string -> *tenantUse, when share > 0, while the tenant holds a record
	interned   atomic.Pointer[namePair] // the strings of the pair interned last, which the next shard to intern it shares (admin.go)
	shards     [shardCount]shard
}

// tenantUse counts the records of one tenant, expired ones not yet removed
// included. The counter leaves Store.tenants with the tenant's last record:
// the remover that takes n from 0 to -1 (retired) deletes it and uncounts
// its bytes; an admission that finds it retired makes a new one.
type tenantUse struct {
	n      atomic.Int64
	tenant string // a copy of the tenant, counted in Store.bytes (NameOverhead + its length)
}

func (tu *tenantUse) size() int64 { return NameOverhead + int64(len(tu.tenant)) }

type shard struct {
	mu   sync.Mutex
	recs map[[32]byte]*record
	// soonest is at or before the expiry of the head of every queue
	// (math.MaxInt64 when there is none): until the clock reaches it,
	// nothing in the shard has expired and claims do not look. Every
	// expiry set lowers it; expire sets it to the earliest head it kept.
	// It is written under mu and read without it (reclaim).
	soonest atomic.Int64
	// queues are the shard's expiry queues, one per TTL class in use.
	queues []queue
	// first and names intern the tenants and operations of the shard's
	// records, each while a record of the shard points at it; last is the
	// pair interned or found last, nil when it left (admin.go).
	first keyNames
	names map[namePair]*keyNames
	last  *keyNames
	// inspected counts the records whose expiry was looked at to find
	// expired ones (tests bound it).
	inspected int64
}

type record struct {
	fp         idem.Fingerprint
	token      idem.Token
	scheme     uint32
	status     idem.Status
	queue      uint8 // index of the expiry queue holding it in shard.queues
	leaseUntil int64 // instants of the store's clock, see Store.now
	expiresAt  int64
	out        idem.Outcome
	id         [32]byte   // the key's ID, the record's place in shard.recs
	prev, next *record    // neighbours in the expiry queue
	tenant     *tenantUse // the tenant's count, nil when no share applies
	names      *keyNames  // the key's tenant and operation, for operators (admin.go)
	created    int64      // when the record was created, for operators
}

// queue holds the records of one TTL class of a shard in the order their
// expiries were set: with a clock that does not go back, records of one TTL
// are in expiry order, so the expired ones are found at the head without
// looking at a live one.
type queue struct {
	class      uint8
	head, tail *record
}

// ttlClass groups TTLs within a factor of 1.5 of each other (the bit
// length of the TTL and the bit after the first): at most 130 classes. A
// queue of one class is in expiry order when all its records have the same
// TTL; with mixed TTLs of a class a record may wait behind one that expires
// later by less than its own TTL.
func ttlClass(ttl time.Duration) uint8 {
	if ttl <= 0 {
		return 0
	}
	e := bits.Len64(uint64(ttl)) // 1..63
	m := 0
	if e >= 2 {
		m = int(uint64(ttl)>>(e-2)) & 1
	}
	return uint8(2*e + m)
}

// size is what r counts against WithMaxBytes.
func (r *record) size() int64 {
	return RecordOverhead + outcomeLen(r.out)
}

func outcomeLen(out idem.Outcome) int64 { return int64(idem.OutcomeLen(&out)) }

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

// WithTenantShare caps the records one tenant holds at n (default: the
// record bound divided by DefaultTenantShareDivisor), so that one tenant
// sending fresh keys cannot fill the store for every other. A new claim of
// a tenant that holds n records (expired ones not yet removed included: a
// refusal first removes expired records) is refused with an error wrapping
// a *idem.TenantQuotaError, which wraps idem.ErrStoreFull: only that tenant
// is refused, the method is not called, and the tenant's replays, outcomes
// and releases go on. The share applies to named tenants only: the single
// key space of idem.SingleTenant (tenant "") has no one to share with and
// is bounded by WithMaxRecords and WithMaxBytes alone. n == 0 turns the
// share off; New panics if n is negative. While a share applies, the store
// keeps one small counter per tenant that holds a record, counted against
// WithMaxBytes (NameOverhead and the tenant's length).
func WithTenantShare(n int) Option {
	return func(s *Store) {
		if n < 0 {
			panic(fmt.Sprintf("memstore: WithTenantShare(%d): the share must not be negative", n))
		}
		s.share = int64(n)
	}
}

// TenantShare returns the number of records one tenant may hold (0: no
// share applies), as WithTenantShare or its default set it.
func (s *Store) TenantShare() int { return int(s.share) }

// TenantLen returns the number of records tenant holds, expired ones not
// yet removed included, as the tenant share counts them (0 when no share
// applies or the tenant is the single key space ""), for metrics.
func (s *Store) TenantLen(tenant string) int {
	if v, ok := s.tenants.Load(tenant); ok {
		return int(max(v.(*tenantUse).n.Load(), 0))
	}
	return 0
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{maxRecords: DefaultMaxRecords, maxBytes: DefaultMaxBytes, share: -1}
	for i := range s.shards {
		s.shards[i].recs = make(map[[32]byte]*record)
		s.shards[i].names = make(map[namePair]*keyNames, 1)
		s.shards[i].soonest.Store(math.MaxInt64)
	}
	for _, o := range opts {
		o(s)
	}
	if s.share < 0 {
		s.share = max(s.maxRecords/DefaultTenantShareDivisor, 1)
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

// expireAt sets r's expiry to ttl after now and moves r to the tail of
// the expiry queue of ttl's class, keeping sh.soonest at or before it. The
// shard's lock is held.
func (sh *shard) expireAt(r *record, now int64, ttl time.Duration) {
	at := after(now, ttl)
	r.expiresAt = at
	if r.prev != nil || sh.queues != nil && sh.queues[r.queue].head == r {
		sh.unlink(r)
	}
	class := ttlClass(ttl)
	i := 0
	for i < len(sh.queues) && sh.queues[i].class != class {
		i++
	}
	if i == len(sh.queues) {
		sh.queues = append(sh.queues, queue{class: class})
	}
	q := &sh.queues[i]
	r.queue = uint8(i)
	r.prev, r.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = r
	} else {
		q.head = r
	}
	q.tail = r
	if at < sh.soonest.Load() {
		sh.soonest.Store(at)
	}
}

// unlink takes r out of its expiry queue. The shard's lock is held.
func (sh *shard) unlink(r *record) {
	q := &sh.queues[r.queue]
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		q.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		q.tail = r.prev
	}
	r.prev, r.next = nil, nil
}

func (s *Store) shard(k idem.Key) *shard { return &s.shards[k.ID[0]%shardCount] }

// remove deletes the record of id from sh, with its names and tenant
// counter when it was their last record. The shard's lock is held.
func (s *Store) remove(sh *shard, id [32]byte, r *record) {
	delete(sh.recs, id)
	sh.unlink(r)
	s.records.Add(-1)
	s.bytes.Add(-r.size() - sh.unref(r.names))
	if r.tenant != nil {
		s.leave(r.tenant)
	}
}

// leave uncounts a record of tu's tenant, retiring the counter with the
// tenant's last record.
func (s *Store) leave(tu *tenantUse) {
	if tu.n.Add(-1) == 0 && tu.n.CompareAndSwap(0, -1) {
		s.tenants.CompareAndDelete(tu.tenant, tu)
		s.bytes.Add(-tu.size())
	}
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
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	for reclaimed := false; ; reclaimed = true {
		refusal := s.claim(ctx, &req, &c)
		if refusal == admitted {
			return c, nil
		}
		if reclaimed || s.reclaim() == 0 {
			return idem.Claim{}, s.refusal("claim", req.Key, refusal)
		}
	}
}

// refusal is why a new record was not admitted.
type refusal uint8

const (
	admitted refusal = iota
	storeFull
	tenantFull
)

// refusal returns the error of a refused new record, a *refusedError:
// formatted only when read, so that a flood of refusals costs an
// allocation or two each, not a formatting.
func (s *Store) refusal(op string, k idem.Key, why refusal) error {
	e := &refusedError{op: op, id: k.ID, err: idem.ErrStoreFull,
		records: s.records.Load(), bytes: s.bytes.Load(), maxRecords: s.maxRecords, maxBytes: s.maxBytes}
	if why == tenantFull {
		e.err = &idem.TenantQuotaError{Tenant: k.Tenant, Share: s.share}
	}
	return e
}

// refusedError is a claim (or seed) refused for room: it reads as
// errorf's "memstore: op <key hex>: ..." and unwraps to idem.ErrStoreFull
// or an *idem.TenantQuotaError.
type refusedError struct {
	op                                   string
	id                                   [32]byte
	err                                  error
	records, bytes, maxRecords, maxBytes int64
}

func (e *refusedError) Error() string {
	if _, ok := e.err.(*idem.TenantQuotaError); ok {
		return fmt.Sprintf("memstore: %s %x: %v", e.op, e.id, e.err)
	}
	return fmt.Sprintf("memstore: %s %x: %d records, %d bytes (bounds %d records, %d bytes): %v",
		e.op, e.id, e.records, e.bytes, e.maxRecords, e.maxBytes, e.err)
}

// Unwrap returns idem.ErrStoreFull or the *idem.TenantQuotaError.
func (e *refusedError) Unwrap() error { return e.err }

// admit counts a new record of size bytes of tenant against the tenant's
// share and the store's bounds, returning the tenant's count to keep in
// the record (nil when no share applies) or why it was refused.
func (s *Store) admit(tenant string, size int64) (*tenantUse, refusal) {
	var tu *tenantUse
	if s.share > 0 && tenant != "" {
		if tu = s.enter(tenant); tu == nil {
			return nil, tenantFull
		}
	}
	if !s.reserve(size) {
		if tu != nil {
			s.leave(tu)
		}
		return nil, storeFull
	}
	return tu, admitted
}

// enter counts a new record of tenant against its share, returning the
// tenant's counter, or nil when the tenant holds its share. A counter is
// made (and its bytes counted) when the tenant holds no record.
func (s *Store) enter(tenant string) *tenantUse {
	for {
		v, ok := s.tenants.Load(tenant)
		if !ok {
			nu := &tenantUse{tenant: strings.Clone(tenant)}
			if v, ok = s.tenants.LoadOrStore(nu.tenant, nu); !ok {
				s.bytes.Add(nu.size())
			}
		}
		tu := v.(*tenantUse)
		n := tu.n.Load()
		switch {
		case n < 0: // retired with the tenant's last record: its remover deletes it
			s.tenants.CompareAndDelete(tenant, tu)
		case n >= s.share:
			return nil
		case tu.n.CompareAndSwap(n, n+1):
			return tu
		}
	}
}

// claim is one attempt of Claim under the shard's lock, answering in c
// (written in place: a Claim is large to copy), or saying why a new record
// was refused.
func (s *Store) claim(ctx context.Context, req *idem.ClaimRequest, c *idem.Claim) refusal {
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	if now >= sh.soonest.Load() {
		s.expire(sh, now, expirePerClaim)
	}
	r := s.live(sh, req.Key.ID, now)
	switch {
	case r == nil:
		names, size := sh.lookup(req.Key)
		tu, why := s.admit(req.Key.Tenant, RecordOverhead+size) // a record without an outcome (see record.size), and new names
		if why != admitted {
			return why
		}
		r = &record{
			fp: req.Fingerprint, token: req.Token, scheme: req.Scheme, status: idem.StatusProcessing,
			leaseUntil: after(now, req.Lease), id: req.Key.ID, tenant: tu,
			names: s.ref(sh, names, req.Key), created: now,
		}
		sh.expireAt(r, now, req.TTL)
		sh.recs[req.Key.ID] = r
		c.Claimed = true
		return admitted
	case r.status == idem.StatusProcessing && r.token == req.Token && r.fp == req.Fingerprint:
		// The record still holds this token, so nobody took the key over:
		// the retry gets a fresh lease for the method it is about to start.
		r.leaseUntil = min(after(now, req.Lease), r.expiresAt)
		c.Claimed = true
		return admitted
	case r.status == idem.StatusProcessing && now >= r.leaseUntil &&
		(r.fp == req.Fingerprint || mutated(ctx, mTakeoverWithoutFingerprint)): // a known mistake, for the simulator's tests
		r.token = req.Token
		r.scheme = req.Scheme
		r.leaseUntil = after(now, req.Lease)
		sh.expireAt(r, now, req.TTL)
		c.Claimed, c.TakenOver = true, true
		return admitted
	}
	rec := &c.Record
	rec.Status, rec.Fingerprint, rec.Scheme, rec.Token, rec.Outcome = r.status, r.fp, r.scheme, r.token, r.out
	if r.status == idem.StatusProcessing {
		rec.LeaseLeft = time.Duration(max(r.leaseUntil-now, 0))
	}
	return admitted
}

// reclaim removes up to reclaimBudget expired records, the heads of the
// expiry queues of the shards whose earliest expiry has passed, starting at
// a shard that moves on with every call so that refusals spread over the
// shards; it returns how many it removed. It looks at no live record besides
// a queue's head: a refused claim on a store full of live records costs one
// atomic load per shard.
func (s *Store) reclaim() int {
	now := s.now()
	start := s.cursor.Add(1)
	removed := 0
	for i := range uint32(shardCount) {
		sh := &s.shards[(start+i)%shardCount]
		if now < sh.soonest.Load() {
			continue
		}
		sh.mu.Lock()
		removed += s.expire(sh, now, reclaimBudget-removed)
		sh.mu.Unlock()
		if removed == reclaimBudget {
			break
		}
	}
	return removed
}

// expire removes up to n expired records from the heads of sh's expiry
// queues and sets sh.soonest to the earliest head kept. The shard's lock
// is held.
func (s *Store) expire(sh *shard, now int64, n int) int {
	removed := 0
	soonest := int64(math.MaxInt64)
	for i := range sh.queues {
		q := &sh.queues[i]
		for r := q.head; r != nil; r = q.head {
			sh.inspected++
			if now < r.expiresAt || removed == n {
				soonest = min(soonest, r.expiresAt)
				break
			}
			s.remove(sh, r.id, r)
			removed++
		}
	}
	sh.soonest.Store(soonest)
	return removed
}

// Complete implements idem.Store. Complete repeated by the token that
// stored the outcome (a retry after a lost reply) answers nil and keeps the
// stored outcome.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := idem.CheckOutcome(&out, ttl); err != nil {
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
	case mutated(ctx, mCompleteWithoutFencing): // a known mistake, for the simulator's tests
	case r.token != token:
		return errorf("complete", key, idem.ErrLeaseLost)
	case r.status != idem.StatusProcessing:
		return nil // this token's outcome is stored already
	}
	s.bytes.Add(outcomeLen(out) - outcomeLen(r.out))
	r.status = out.Status
	r.out = out
	r.leaseUntil = 0
	sh.expireAt(r, now, ttl)
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
// while it is swept, so claims on other shards go on. A bounded Sweep takes
// the expired records from the heads of the shards' expiry queues, looking
// at no live record but the heads; Sweep(ctx, 0) looks at every record.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	removed := 0
	for i := range s.shards {
		if limit > 0 && removed == limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("memstore: sweep: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		if limit <= 0 {
			removed += s.sweepExpired(sh, s.now())
		} else {
			removed += s.expire(sh, s.now(), limit-removed)
		}
		sh.mu.Unlock()
	}
	return removed, nil
}

// sweepExpired removes every expired record of sh, looking at each (a
// record of a TTL class with mixed TTLs may expire behind a queue's head),
// and sets sh.soonest to the earliest head kept. The shard's lock is held.
func (s *Store) sweepExpired(sh *shard, now int64) int {
	n := 0
	for id, r := range sh.recs {
		sh.inspected++
		if now >= r.expiresAt {
			s.remove(sh, id, r)
			n++
		}
	}
	s.expire(sh, now, 0)
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
	if err := idem.CheckKey(key); err != nil {
		return errorf("seed", key, err)
	}
	out := rec.Outcome
	if err := idem.CheckOutcome(&out, ttl); err != nil {
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
	r := &record{fp: rec.Fingerprint, token: rec.Token, scheme: rec.Scheme, status: out.Status, out: out, id: key.ID,
		created: now}
	if old != nil {
		s.remove(sh, key.ID, old)
	}
	if now >= sh.soonest.Load() {
		s.expire(sh, now, expirePerClaim)
	}
	names, size := sh.lookup(key)
	tu, why := s.admit(key.Tenant, r.size()+size)
	if why != admitted {
		return s.refusal("seed", key, why)
	}
	r.tenant = tu
	r.names = s.ref(sh, names, key)
	sh.expireAt(r, now, ttl)
	sh.recs[key.ID] = r
	return nil
}

var (
	_ idem.LocalStore = (*Store)(nil)
	_ idem.Renewer    = (*Store)(nil)
	_ idem.Seeder     = (*Store)(nil)
)
