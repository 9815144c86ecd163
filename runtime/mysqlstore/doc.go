// Package mysqlstore is the MySQL and MariaDB idempotency store of idemgen,
// on database/sql and github.com/go-sql-driver/mysql.
//
// A record is a row of one table (idem_records by default, see Schema)
// under the primary key idem_key, the 32-byte SHA-256 of tenant, operation
// and key parts (idem.Key.ID). Every other byte string (tenant, operation,
// readable key, error code and message, body, metadata) is kept in a binary
// column of a table whose character set is binary: no collation folds case,
// trims trailing spaces or refuses a byte, and none of them is compared.
// Leases and expiries are microseconds since the Unix epoch by the server's
// UTC clock (UTC_TIMESTAMP(6)): processes share the database's clock, never
// their own, and the session's time_zone plays no part.
//
// Lease mode ([New]) implements [idem.Store] and [idem.Renewer]. A claim
// reads the key's row without a lock (a replay or a duplicate costs that one
// round trip), inserts a fresh key's row with a plain INSERT (a concurrent
// claim of the same key fails on the primary key and reads again), and
// takes over an expired record or a lapsed lease of the same payload in a
// short READ COMMITTED transaction under the row's lock (SELECT … FOR
// UPDATE). Complete, Release and Renew are one statement each, fenced by
// the token.
//
// Transactional mode ([NewTx]) implements [idem.TxStore]: the claim, the
// method's own writes (through [TxFrom]) and the outcome commit together or
// not at all. Claims of a key are serialized by user-level locks
// (GET_LOCK with a timeout of 0, so no claim ever waits in the server): see
// [TxStore.ClaimTx]. No PROCESSING row is ever committed in this mode, so
// there is no lease to lose: a crashed or killed caller's transaction rolls
// back with its connection, and the next caller runs the method once.
// The locks are the server's own: on a MariaDB Galera cluster, which does
// not replicate them, every transactional claim fails with [ErrGalera];
// use lease mode there, with wsrep_sync_wait=15 in the DSN
// (docs/FAILOVER.md).
//
// Lock waits are bounded: a write waits at most WithLockTimeout (5s by
// default) for its answer; a deadlock (error 1213) or a lock wait timeout
// (1205) is a transient store error, never a decision: the executor
// retries or reports the store unavailable, and never runs the method a
// second time for it. A deadlock the method itself meets in transactional
// mode rolls its whole transaction back (InnoDB's rule): return the error
// from the method; a Complete after it fails, storing nothing.
//
// # Connections, outcome sizes, isolation (issue 34)
//
// A call holds at most one connection of the pool at a time, in both
// modes, on a pool of one connection too: the first call of a store
// prepares every statement on the pool and reads the server's settings
// before it takes a connection of its own, and a statement run in a
// transaction is prepared on that transaction's connection. A
// transactional claim that finds every connection of the pool in use (held
// by running calls) waits at most [WithAcquireTimeout] (250ms by default)
// and answers [idem.ErrStoreBusy] (HTTP 503 store-busy): nothing was
// claimed. A transactional call nested in another on the same *sql.DB (an
// idemhttp edge around a generated wrapper, docs/LAYERS.md) claims its key
// in the enclosing call's transaction, under a savepoint, on its
// connection ([TxStore.ClaimNested], [idem.NestingTxStore]).
//
// The server's max_allowed_packet is read once per store: an outcome that
// cannot fit in it (less a few KiB for the statement's other arguments) is
// refused before it is sent, with [idem.ErrTooLarge], so that the
// executor's small "outcome not stored" substitute is stored instead (in
// transactional mode the store writes that substitute in the call's
// transaction itself): retries get [idem.ErrOutcomeNotStored], never a
// second run. A Complete that fails after it sent an outcome drops its
// prepared statement (the server may leave it failing: go-sql-driver/mysql
// issue 307) and reads the limit again.
//
// The store's reads of committed records (the claim's first look, the
// checks after a write, a failed Complete's "did it commit?", Lookup) see
// committed rows only, whatever the pool's isolation level: at READ
// UNCOMMITTED they run in a READ COMMITTED transaction of their own, and
// the claim transactions of transactional mode are raised to READ
// COMMITTED. At the other levels the method's transaction runs at the
// pool's level.
//
// [BeginTx] begins a method's own unit of work: a savepoint in the call's
// transaction inside a transactional call, a transaction of its own
// elsewhere.
//
// Migrations are plain SQL of one statement each ([MigrationFiles] for
// golang-migrate, [GooseMigrationFiles] for goose): version 1 the table,
// version 2 the operators' listing index; [Store.Migrate] runs the same
// statements, and never alters a table that exists (a table made by hand
// that lacks a column fails with error 1054 and idem.ErrStoreSchema, which
// Migrate does not fix). [Store.Sweep] removes expired records in batches that follow
// the expiry index and skip locked rows; pace it with idem.Sweeper.
//
// # Operators
//
// Both modes implement [idem.AdminStore] (idemctl's mysql:// DSNs and
// runtime/idemadmin use it): [Store.Lookup] probes the primary key;
// [Store.List] reads an operation's records newest first through the index
// on (op, created_at, idem_key), at most [ListScanBudget] index entries per
// operation and call, so it never scans the table (a page of a rare status
// may come back short, with a cursor to go on from); [Store.Stats] counts
// live records by operation and status; [Store.Forget] deletes a record
// only if it still holds the token and status the operator looked at, under
// the row's lock, so that a racing claim, takeover or Complete is never
// lost. A transactional claim's row is locked by its open transaction:
// Forget waits for it at most a second and answers idem.ErrLeaseLive,
// forced or not, and Lookup does not see it (it is not committed).
//
// # Servers
//
// The tests run on MariaDB 10.11 (Debian's). MySQL 8.0 works on the same
// statements, which keep to the subset both speak: SKIP LOCKED (MySQL 8.0.1,
// MariaDB 10.6), GET_LOCK with several locks per session (MySQL 5.7,
// MariaDB 10.0.2), CHECK constraints (enforced from MySQL 8.0.16), no
// RETURNING, no SET STATEMENT. See docs/decisions/mysqlstore.md for what a
// MySQL 8.0 user must know: SQL modes, lock-wait errors, ON DUPLICATE KEY.
package mysqlstore
