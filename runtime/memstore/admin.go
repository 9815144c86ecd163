package memstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// keyNames is a tenant and an operation, interned per shard: a record
// keeps a pointer to its key's (8 bytes) rather than the two strings (32),
// and no readable key text (the executor passes a LocalStore none unless
// an observer reads it). A shard keeps a pair while one of its records
// points at it (refs), and remembers the pair it found last (shard.last:
// one comparison answers the usual case, one operation of one tenant after
// another). A pair counts nameSize bytes in Store.bytes while it is kept.
// The shard's first pair lives in the shard itself (shard.first, free
// while its refs are 0), its others in shard.names, so that a store of one
// pair (a single-tenant service with one method) allocates nothing per
// shard for it.
type keyNames struct {
	tenant, op string
	refs       int // the shard's records that point at it, under the shard's lock
}

// namePair is a tenant and an operation, the key of shard.names.
type namePair struct{ tenant, op string }

// nameSize is what a pair or a tenant's counter of these names counts
// against WithMaxBytes.
func nameSize(tenant, op string) int64 { return NameOverhead + int64(len(tenant)+len(op)) }

// lookup returns the interned names of k's tenant and operation in sh, or
// nil and the bytes a new pair would count. The shard's lock is held.
func (sh *shard) lookup(k idem.Key) (*keyNames, int64) {
	if n := sh.last; n != nil && n.tenant == k.Tenant && n.op == k.Op {
		return n, 0
	}
	if n := &sh.first; n.refs > 0 && n.tenant == k.Tenant && n.op == k.Op {
		return n, 0
	}
	if n, ok := sh.names[namePair{k.Tenant, k.Op}]; ok {
		return n, 0
	}
	return nil, nameSize(k.Tenant, k.Op)
}

// ref counts a new record of sh pointing at n, the interned names lookup
// returned for k, interning k's tenant and operation when n is nil, and
// returns the names. The names' strings are the store's own, so that they
// hold no caller's memory: a copy (one string for both), or the strings of
// the pair interned last by any shard when it is k's (Store.interned: one
// pair used everywhere is copied once, not once per shard; each shard
// counts the strings it may share, an upper bound). The shard's lock is
// held; the new pair's bytes were counted.
func (s *Store) ref(sh *shard, n *keyNames, k idem.Key) *keyNames {
	if n == nil {
		p := s.interned.Load()
		if p == nil || p.tenant != k.Tenant || p.op != k.Op {
			var sb strings.Builder
			sb.Grow(len(k.Tenant) + len(k.Op))
			sb.WriteString(k.Tenant)
			sb.WriteString(k.Op)
			both := sb.String()
			p = &namePair{tenant: both[:len(k.Tenant)], op: both[len(k.Tenant):]}
			s.interned.Store(p)
		}
		if sh.first.refs == 0 {
			n = &sh.first
			n.tenant, n.op = p.tenant, p.op
		} else {
			n = &keyNames{tenant: p.tenant, op: p.op}
			sh.names[*p] = n
		}
	}
	n.refs++
	sh.last = n
	return n
}

// unref uncounts a record of sh pointing at n, dropping n with its last
// record, and returns the bytes freed. The shard's lock is held.
func (sh *shard) unref(n *keyNames) int64 {
	if n.refs--; n.refs > 0 {
		return 0
	}
	size := nameSize(n.tenant, n.op)
	if n == &sh.first {
		n.tenant, n.op = "", "" // free for the next pair
	} else {
		delete(sh.names, namePair{n.tenant, n.op})
	}
	if sh.last == n {
		sh.last = nil
	}
	return size
}

// at returns the instant of the store's clock at offset t.
func (s *Store) at(t int64) time.Time { return s.base.Add(time.Duration(t)) }

// entry returns r as an operator sees it at now. The shard's lock is held.
func (s *Store) entry(r *record, now int64) idem.Entry {
	e := idem.Entry{
		Key:     idem.Key{Tenant: r.names.tenant, Op: r.names.op, ID: r.id},
		Record:  idem.Record{Status: r.status, Fingerprint: r.fp, Scheme: r.scheme, Token: r.token, Outcome: r.out},
		Created: s.at(r.created),
		Expires: s.at(r.expiresAt),
	}
	if r.status == idem.StatusProcessing {
		e.LeaseUntil = s.at(r.leaseUntil)
		e.LeaseLeft = time.Duration(max(r.leaseUntil-now, 0))
	}
	return e
}

// Lookup implements idem.AdminStore.
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	if err := ctx.Err(); err != nil {
		return idem.Entry{}, errorf("lookup", key, err)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := s.live(sh, key.ID, now)
	if r == nil {
		return idem.Entry{}, errorf("lookup", key, idem.ErrNotFound)
	}
	return s.entry(r, now), nil
}

// each calls f with every live record, shard by shard, each under its lock,
// and returns the store's now of the walk.
func (s *Store) each(ctx context.Context, f func(idem.Entry)) (time.Time, error) {
	now := s.now()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, r := range sh.recs {
			if now < r.expiresAt {
				f(s.entry(r, now))
			}
		}
		sh.mu.Unlock()
	}
	return s.at(now), nil
}

// List implements idem.AdminStore. It looks at every record (each shard
// under its lock in turn): a memstore holds at most WithMaxRecords.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	var all []idem.Entry
	now := s.at(s.now())
	if _, err := s.each(ctx, func(e idem.Entry) {
		if q.Matches(e, now) {
			all = append(all, e)
		}
	}); err != nil {
		return idem.Page{}, fmt.Errorf("memstore: list: %w", err)
	}
	p, err := idem.PageOf(q, all)
	if err != nil {
		return idem.Page{}, fmt.Errorf("memstore: list: %w", err)
	}
	return p, nil
}

// Stats implements idem.AdminStore. It looks at every record, as List.
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	m := map[idem.Stat]int64{}
	if _, err := s.each(ctx, func(e idem.Entry) {
		if (!q.ByTenant || e.Key.Tenant == q.Tenant) && (q.Op == "" || e.Key.Op == q.Op) {
			idem.CountStats(m, e)
		}
	}); err != nil {
		return nil, fmt.Errorf("memstore: stats: %w", err)
	}
	return idem.SortedStats(m), nil
}

// Forget implements idem.AdminStore, under the key's shard lock.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	if err := ctx.Err(); err != nil {
		return errorf("forget", req.Key, err)
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := s.live(sh, req.Key.ID, now)
	switch {
	case r == nil:
		return errorf("forget", req.Key, idem.ErrNotFound)
	case r.token != req.Token || r.status != req.Status:
		return errorf("forget", req.Key, idem.ErrRecordChanged)
	case r.status == idem.StatusProcessing && now < r.leaseUntil && !req.Force:
		return errorf("forget", req.Key, idem.ErrLeaseLive)
	}
	s.remove(sh, req.Key.ID, r)
	return nil
}

var _ idem.AdminStore = (*Store)(nil)
