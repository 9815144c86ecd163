package memstore

// Inspected returns how many records the store has looked at to find
// expired ones since New: the cost the refusal tests bound.
func Inspected(s *Store) int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.inspected
		sh.mu.Unlock()
	}
	return n
}

// Footprint returns the state the store derives from its callers' names:
// the interned tenant and operation pairs of every shard and the tenant
// counters of the share.
func Footprint(s *Store) (names, tenants int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		names += len(sh.names)
		if sh.first.refs > 0 {
			names++
		}
		sh.mu.Unlock()
	}
	s.tenants.Range(func(any, any) bool { tenants++; return true })
	return names, tenants
}

// NamesBytes returns what the store's interned names and tenant counters
// count in Bytes.
func NamesBytes(s *Store) int64 {
	var b int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for p := range sh.names {
			b += nameSize(p.tenant, p.op)
		}
		if sh.first.refs > 0 {
			b += nameSize(sh.first.tenant, sh.first.op)
		}
		sh.mu.Unlock()
	}
	s.tenants.Range(func(_, v any) bool { b += v.(*tenantUse).size(); return true })
	return b
}
