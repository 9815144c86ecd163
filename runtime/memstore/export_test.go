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
