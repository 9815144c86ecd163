package pgstore

// ClaimRetries returns how many claim statements were run again because a
// concurrent transaction committed the conflicting row after the statement's
// snapshot was taken.
func (s *Store) ClaimRetries() int64 { return s.claimRetries.Load() }

// SQL returns the store's claim and complete statements, for the raw pgx
// baselines of the benchmarks.
func (s *Store) SQL() (claim, complete, sweep string) {
	return s.sql.claim, s.sql.complete, s.sql.sweep
}

// TxSQL returns the transactional claim and the key lock statements.
func (s *Store) TxSQL() (claim, keyLock string) { return s.sql.claimTx, s.sql.keyLock }

// Exported for the baselines.
const (
	SetLockTimeout     = setLockTimeout
	SaveLockTimeout    = saveLockTimeout
	RestoreLockTimeout = restoreLockTimeout
	SavepointSQL       = savepointSQL
)
