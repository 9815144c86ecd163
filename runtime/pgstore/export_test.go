package pgstore

// ClaimRetries returns how many claim statements were run again because a
// concurrent transaction committed the conflicting row after the statement's
// snapshot was taken.
func (s *Store) ClaimRetries() int64 { return s.claimRetries.Load() }

// SQL returns the store's first claim statement (fast: a first call's and a
// replay's) and its complete statement, for the raw pgx baselines of the
// benchmarks.
func (s *Store) SQL() (claim, complete, sweep string) {
	return s.sql.fast, s.sql.complete, s.sql.sweep
}

// TxSQL returns the transactional first claim, the key lock and the guard
// statements.
func (s *Store) TxSQL() (claim, keyLock, finalGuard, guard string) {
	return s.sql.fastTx, s.sql.keyLock, s.sql.finalGuard, s.sql.guard
}

// Exported for the baselines.
const SavepointSQL = savepointSQL

// IsGuard reports whether err is the transactional guard's failure.
var IsGuard = isGuard
