package pgstore

import (
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

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

// Exported for the baselines.
const SavepointSQL = savepointSQL

// SetParkIdle sets how long a parked connection waits for the next claim
// (see parking): long in tests that count round trips on a loaded machine.
func (s *TxStore) SetParkIdle(d time.Duration) { s.parking.idle = d }

// SetFlightHooks sets the hooks of ClaimTx's flights (see flightHooks):
// answered runs in a leader once its claim batch answered, before the
// duplicates learn the answer; joined runs in a duplicate once it joined a
// flight.
func (s *TxStore) SetFlightHooks(answered, joined func()) {
	s.hooks = flightHooks{answered: answered, joined: joined}
}

// Hinted reports whether the store holds k's finals hint (see finals).
func (s *Store) Hinted(k idem.Key) bool { return s.finals.has(k) }

// PlainTxSQL returns the statements of ClaimTx's batch on the plain table:
// probe, the insert of a key without a row, and the full claim statement.
func (s *Store) PlainTxSQL() (probe, insert, claim string) {
	return s.sql.txText.decide, s.sql.txText.fast, s.sql.txText.claim
}
