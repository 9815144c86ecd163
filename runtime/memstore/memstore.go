// Package memstore is the embedded idempotency store: records live in this
// process's memory, sharded by key, and expire on the store's clock.
//
// It is the default for tests, demos and single-instance services. Its
// guarantee ends with the process: a restart forgets every key, and two
// instances do not see each other's keys. Use pgstore (or tiered) when
// several instances serve the same keys or money moves.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemgen/idemgen/internal/mutant"
	"github.com/idemgen/idemgen/runtime/idem"
)

const shardCount = 64

// Every sweepEvery-th claim of a shard inspects sweepBatch of its records
// for expiry, so that memory held by expired keys stays bounded without a
// goroutine: two records per claim on average, paying for the start of a
// map iteration once per batch instead of once per claim.
const (
	sweepEvery = 16
	sweepBatch = 2 * sweepEvery
)

// Store is an in-memory idem.Store, safe for concurrent use.
type Store struct {
	now    func() time.Time
	shards [shardCount]shard
}

type shard struct {
	mu     sync.Mutex
	recs   map[[32]byte]*record
	claims uint32 // claims since the last sweep
}

type record struct {
	fp         idem.Fingerprint
	token      idem.Token
	status     idem.Status
	leaseUntil time.Time
	expiresAt  time.Time
	out        idem.Outcome
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (default time.Now); tests pass a fake one
// to expire leases and records without sleeping.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now}
	for i := range s.shards {
		s.shards[i].recs = make(map[[32]byte]*record)
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Store) shard(k idem.Key) *shard { return &s.shards[k.ID[0]%shardCount] }

// live returns the record of id if it exists and has not expired, deleting an
// expired one. The shard's lock is held.
func (sh *shard) live(id [32]byte, now time.Time) *record {
	r, ok := sh.recs[id]
	if !ok {
		return nil
	}
	if !now.Before(r.expiresAt) {
		delete(sh.recs, id)
		return nil
	}
	return r
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	if sh.claims++; sh.claims == sweepEvery {
		sh.claims = 0
		sh.sweep(now, sweepBatch)
	}
	r := sh.live(req.Key.ID, now)
	switch {
	case r == nil:
		sh.recs[req.Key.ID] = &record{
			fp: req.Fingerprint, token: req.Token, status: idem.StatusProcessing,
			leaseUntil: now.Add(req.Lease), expiresAt: now.Add(req.TTL),
		}
		return idem.Claim{Claimed: true}, nil
	case r.status == idem.StatusProcessing && !now.Before(r.leaseUntil) &&
		(r.fp == req.Fingerprint || mutant.On(ctx, mutant.TakeoverWithoutFingerprint)): // a known mistake, for the simulator's tests
		r.token = req.Token
		r.leaseUntil = now.Add(req.Lease)
		r.expiresAt = now.Add(req.TTL)
		return idem.Claim{Claimed: true, TakenOver: true}, nil
	}
	rec := idem.Record{Status: r.status, Fingerprint: r.fp, Token: r.token, Outcome: r.out}
	if r.status == idem.StatusProcessing {
		rec.LeaseLeft = max(r.leaseUntil.Sub(now), 0)
	}
	return idem.Claim{Record: rec}, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	out.Body = clone(out.Body)
	out.Meta = clone(out.Meta)
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := sh.live(key.ID, now)
	// mutant.CompleteWithoutFencing: a known mistake, for the simulator's tests.
	if r == nil || (r.status != idem.StatusProcessing || r.token != token) && !mutant.On(ctx, mutant.CompleteWithoutFencing) {
		return idem.ErrLeaseLost
	}
	r.status = out.Status
	r.out = out
	r.leaseUntil = time.Time{}
	r.expiresAt = now.Add(ttl)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.live(key.ID, s.now())
	if r == nil || r.status != idem.StatusProcessing || r.token != token {
		return idem.ErrLeaseLost
	}
	delete(sh.recs, key.ID)
	return nil
}

// Len returns the number of records held, expired ones not yet swept
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.recs)
		sh.mu.Unlock()
	}
	return n
}

// Sweep deletes up to batch expired records (all of them when batch <= 0)
// and returns how many it deleted. Each shard is locked only while it is
// swept, so claims on other shards go on.
func (s *Store) Sweep(ctx context.Context, batch int) (int, error) {
	deleted := 0
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		limit := -1
		if batch > 0 {
			limit = batch - deleted
			if limit <= 0 {
				break
			}
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		deleted += sh.sweepExpired(s.now(), limit)
		sh.mu.Unlock()
	}
	return deleted, nil
}

// sweep inspects up to n records (in Go's random map order) and deletes the
// expired ones. The shard's lock is held.
func (sh *shard) sweep(now time.Time, n int) {
	for id, r := range sh.recs {
		if n == 0 {
			return
		}
		n--
		if !now.Before(r.expiresAt) {
			delete(sh.recs, id)
		}
	}
}

// sweepExpired deletes up to limit expired records (all when limit < 0).
func (sh *shard) sweepExpired(now time.Time, limit int) int {
	n := 0
	for id, r := range sh.recs {
		if n == limit {
			break
		}
		if !now.Before(r.expiresAt) {
			delete(sh.recs, id)
			n++
		}
	}
	return n
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Local implements idem.LocalStore: the store never blocks on I/O.
func (s *Store) Local() {}

var _ idem.LocalStore = (*Store)(nil)

// Seed implements idem.Seeder: it stores a completed outcome decided by
// another store (tiered uses it to fill and repair its fast tier). A final
// record already present is kept.
func (s *Store) Seed(ctx context.Context, key idem.Key, fp idem.Fingerprint, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	out.Body = clone(out.Body)
	out.Meta = clone(out.Meta)
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	if r := sh.live(key.ID, now); r != nil && r.status != idem.StatusProcessing {
		return nil
	}
	sh.recs[key.ID] = &record{fp: fp, token: token, status: out.Status, out: out, expiresAt: now.Add(ttl)}
	return nil
}

var _ idem.Seeder = (*Store)(nil)
