package redisstore

import "time"

// SetHintClock sets the clock of the store's refused-tenant hint (see
// overShare), so that tests do not depend on how long they take.
func SetHintClock(s *Store, now func() time.Time) { s.now = now }

// HintLen returns how many refused-tenant hints the store holds (see
// overShare).
func HintLen(s *Store) int {
	n := 0
	s.over.m.Range(func(any, any) bool { n++; return true })
	return n
}
