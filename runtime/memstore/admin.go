package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// keyNames is a tenant and an operation, interned: a record keeps a
// pointer to its key's (8 bytes) rather than the two strings (32), and no
// readable key text (the executor passes a LocalStore none unless an
// observer reads it). The store remembers the pair it interned last
// (Store.names: one atomic load answers the usual case, one operation of
// one tenant after another), and each shard the pairs of its records, for
// the store's life.
type keyNames struct{ tenant, op string }

// intern returns the keyNames of k's tenant and operation. The lock of sh,
// k's shard, is held.
func (s *Store) intern(sh *shard, k idem.Key) *keyNames {
	if n := s.names.Load(); n != nil && n.tenant == k.Tenant && n.op == k.Op {
		return n
	}
	n, ok := sh.names[keyNames{k.Tenant, k.Op}]
	if !ok {
		n = &keyNames{k.Tenant, k.Op}
		sh.names[*n] = n
		s.names.Store(n) // only for a new pair: a steady mix of tenants writes nothing shared
	}
	return n
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
