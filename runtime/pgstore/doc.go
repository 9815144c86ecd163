// Package pgstore is the PostgreSQL idempotency store of idemgen, on pgx v5
// (pgxpool). It is the final line: a record is a row under the primary key
// (tenant, op, key), so two claims of one key cannot both succeed, whichever
// process or host they come from.
//
// # Two modes
//
// Lease mode ([New]) implements [idem.Store]. A claim is committed on its own
// before the method runs, as with Redis: Claim is one INSERT … ON CONFLICT
// statement that creates the PROCESSING row, or takes over a record that has
// expired or whose lease lapsed (same payload, fresh fencing token), or
// returns the live record. Complete and Release are fenced by the token: a
// worker whose lease was taken over gets [idem.ErrLeaseLost] and changes
// nothing. Lease mode guarantees at most one running claim per live lease and
// exactly one stored outcome per key; it cannot undo the method's own side
// effects, so a worker that stalls past its lease may have run the method
// once more than the outcome says (the lease must exceed the method's run
// time).
//
// Transactional mode ([NewTx]) implements [idem.TxStore]. The claim, the
// method's own writes and the outcome run in one transaction on one
// connection: the method gets it with [TxFrom] and writes its business rows
// through it. The claim holds a transaction-scoped advisory lock on the key;
// a concurrent duplicate waits on it (for at most the method's inflight wait,
// through lock_timeout on that one statement; never unbounded) and then
// replays the committed outcome, or claims the key itself if the first
// transaction rolled back. Replays of a committed outcome take no lock. A transient error, a panic or a lost connection
// rolls everything back: no record and no business row are left behind. A
// final error rolls the business writes back to a savepoint and commits only
// the FAILED_FINAL record. The guarantee covers writes made through the
// transaction only: a call to another system from inside the method is not
// rolled back, and a transaction holds a pooled connection for as long as the
// method runs.
//
// Lease and expiry instants always come from the database clock
// (statement_timestamp()), never from the client's. An expired record behaves
// as absent; [Store.Sweep] deletes expired rows in bounded batches, or moves
// them to an archive table ([WithArchive]).
//
// # Schema
//
// The schema is plain SQL, shipped in the package ([Schema], [ArchiveSchema])
// for any migration tool; [Store.Migrate] applies it idempotently.
//
// # Round trips
//
// With warm statement caches (pgx's default QueryExecModeCacheStatement):
// lease mode takes one round trip per claim and one per outcome (two for a
// first call, one for a replay); transactional mode batches BEGIN, the key
// lock, the claim and the savepoint into one round trip and the outcome with
// COMMIT into another (two for a first call, plus the method's own
// statements; two for a replay, whose second is the ROLLBACK). The first use
// of a statement on a connection adds one round trip to prepare it.
//
// Use one mode per table.
package pgstore
