// Package pgstore is the PostgreSQL idempotency store of idemgen, on pgx v5
// (pgxpool). It is the final line: a record is a row under the primary key
// key, the 32-byte SHA-256 of tenant, operation and key parts (idem.Key.ID),
// so two claims of one key cannot both succeed, whichever process or host
// they come from.
//
// # Two modes
//
// Lease mode ([New]) implements [idem.Store] and [idem.Renewer]. A claim is committed on its own
// before the method runs, as with Redis: Claim is one INSERT … ON CONFLICT
// statement that creates the PROCESSING row, or takes over a record that has
// expired or whose lease lapsed (same payload, fresh fencing token), or
// returns the live record. Complete and Release are fenced by the token: a
// worker whose lease was taken over gets [idem.ErrLeaseLost] and changes
// nothing. Every operation is idempotent for its caller's own token, so that
// a caller may repeat one whose reply it lost: a repeated Claim of a
// PROCESSING record that holds the token (and payload) is claimed again, a
// repeated Complete finds the token's outcome stored and answers nil, a
// Release of a record that is gone answers nil. A Claim whose reply never
// arrived (the context expired after the request was sent, the connection
// broke) is undone by Claim itself before it returns the error, once no
// transaction writes the key any more, so the caller's retry is not blocked
// for the lease by a claim nobody runs. Renew extends a running claim's
// lease without touching an indexed column. Lease mode guarantees at most one running claim per live lease and
// exactly one stored outcome per key; it cannot undo the method's own side
// effects, so a worker that stalls past its lease may have run the method
// once more than the outcome says (the lease must exceed the method's run
// time).
//
// Store outages: once the method ran, the executor keeps its outcome and
// retries Complete (renewing the lease through Renew) for as long as the
// claim can be live, so a restart or failover of PostgreSQL shorter than
// the lease loses nothing and runs nothing twice. In lease mode, a store
// outage longer than the lease after the method ran can run it again;
// transactional mode cannot.
//
// Transactional mode ([NewTx]) implements [idem.TxStore]. The claim, the
// method's own writes and the outcome run in one transaction on one
// connection: the method gets it with [TxFrom] and writes its business rows
// through it. The claim holds a transaction-scoped advisory lock on the key,
// which a claim only tries (pg_try_advisory_xact_lock): no claim waits on
// the server for a lock, and none fails there on purpose. A replay of a
// committed outcome takes no lock. A duplicate of a call whose transaction
// is open is told the key is busy, and by the shared advisory lock the
// holder takes beside the key's, whether the holder runs the same payload
// (idem.ErrInProgress) or another (idem.ErrPayloadMismatch, as with every
// other store). A duplicate that waits (the method's inflight wait) waits
// off the database: in the process that holds the key, in memory until
// the holder's transaction ends, then it replays the committed outcome
// (or claims the key if the holder rolled back); from another process, by
// looking again with a backoff. While a call of this store claims or holds
// a key, its duplicates in the same process take no pooled connection at
// all, so a hot key holds one connection however many duplicates it has.
// Every running call holds a pooled connection: when the pool is
// exhausted, a claim of a new key waits for a connection at most its wait
// or [WithAcquireTimeout] and then fails with [idem.ErrStoreBusy] (which
// also matches [idem.ErrStoreFull]), instead of hanging. A COMMIT whose reply is lost is
// resolved by asking whether the record committed. A transient error, a panic or a lost connection
// rolls everything back: no record and no business row are left behind. A
// final error rolls the business writes back to a savepoint and commits only
// the FAILED_FINAL record. The guarantee covers writes made through the
// transaction only: a call to another system from inside the method is not
// rolled back, and a transaction holds a pooled connection for as long as the
// method runs.
//
// Lease and expiry instants always come from the database clock
// (statement_timestamp()), never from the client's. An expired record behaves
// as absent; [Store.Sweep] removes at most a given number of expired rows per
// call (the meaning every store shares), or moves them to an archive table
// ([WithArchive]).
//
// # Bytes and sizes
//
// Tenants, operations, readable keys, error codes and messages are stored
// as bytea, byte for byte: NUL bytes and invalid UTF-8 are data, never an
// encoding error that could turn a decided outcome into a second run. Only
// the 32-byte key ID is indexed, so a long operation name cannot exceed an
// index row. A tenant longer than [idem.MaxTenantLen], an operation longer
// than [idem.MaxOpLen] or an outcome larger than [idem.MaxOutcomeLen] is
// refused with an error wrapping [idem.ErrTooLarge], before anything is
// written. Errors name the store, the operation and the key's hex ID, and
// wrap their cause (errors.Is works).
//
// # Schema
//
// The schema is plain SQL, shipped in the package as versioned migrations
// that goose and golang-migrate apply unchanged, up and down: version 1 is
// the records table and its index, version 2 the archive table.
// [MigrationFiles] holds them in golang-migrate's layout (N_name.up.sql and
// N_name.down.sql), the one place the statements live; [GooseMigrationFiles]
// holds goose's layout (one N_name.sql per version), derived from it byte for
// byte: "-- +goose Up", the up file, "-- +goose Down", the down file. The two
// tools cannot share one directory (goose would read a pair as two
// migrations of one version), so the goose files are generated and a test
// fails when they differ from what the golang-migrate files give. [Schema]
// and [ArchiveSchema] are the up files, and [Store.Migrate] runs them, so the
// quick path and the tools create the same tables. The files use the default
// names: a store with [WithTable] or another archive name uses Migrate (or
// copies of the files with the names replaced; [Store.MigrationSQL] prints
// them). Version 1 refuses a table in v0.1's layout, naming it, instead of
// leaving it (see Upgrading from v0.1). A store whose table, a column or an
// index is missing (never migrated, or migrated by an older release) answers
// with an error wrapping idem.ErrStoreSchema that names Migrate; the
// executor does not retry it, and the caller's error wraps
// idem.ErrStoreUnavailable. A row
// holds the key ID, token, lease, expiry, sweep instant, creation instant,
// fingerprint scheme, status, fingerprint, the tenant, operation and
// readable key as given, and the outcome (about 200 bytes with a small
// outcome). The only secondary index is on sweep_at, which the claim sets to
// the record's expiry and Complete leaves alone (it only ever moves it
// earlier), so storing an outcome updates no indexed column and can be a HOT
// update (the table's fillfactor of 80 leaves room on the page); the sweeper
// moves sweep_at of a record it finds still live (its outcome, stored after
// the claim, expires later) to the record's expiry. The trade-off: a sweep
// may look at such records once more, and an expired record is removed only
// when the sweeper reaches it, never earlier than its claim's expiry.
//
// # Upgrading from v0.1
//
// v0.1's layout (tenant, op, key_text, err_code and err_message as text,
// primary key (tenant, op, key), updated_at, an index on expires_at) could
// not store NUL bytes or invalid UTF-8. [Store.Migrate] upgrades a table of
// that layout in place, keeping its records (a retry that straddles the
// upgrade still replays): it converts those columns to bytea (their UTF-8
// bytes), makes key alone the primary key (the ID already covers tenant and
// operation), adds scheme and sweep_at, drops updated_at and the old index,
// and does the same to the archive table. The upgrade rewrites the table
// under an exclusive lock, in one transaction: run it (Migrate, or the
// SQL it runs, which MigrationSQL does not include) when no v0.1 process
// writes to the table any more, since a v0.1 process fails on the new
// layout. The table name stays the same. Migration tools do not run this upgrade:
// their version 1 fails on a v0.1 table with an error that says to run
// Migrate once; after it, the tools apply the migrations (with
// golang-migrate, clear the failed attempt first: migrate force -1).
//
// # Round trips
//
// With warm statement caches (pgx's default QueryExecModeCacheStatement):
// lease mode takes one round trip per claim and one per outcome (two for a
// first call, one for a replay); transactional mode sends one batch to
// claim (a probe, which answers a replay or a busy key or tries the key's
// lock, the claim statement, BEGIN and the savepoint) and the outcome with
// COMMIT in another (two for a first call, plus the method's own
// statements; one for a replay or a decided mismatch, two for a duplicate
// of a call that another process runs: the second asks which payload the
// holder runs; none for a duplicate of a call of the same store, which
// waits in memory). No statement
// of a replay, a duplicate or a mismatch fails on the server, in any mode:
// they leave no ERROR in the server's log. The transaction of a batch that
// claimed nothing wrote nothing; its connection is kept for the next claim
// of the store, whose batch starts with its COMMIT (committed by a timer
// after 2ms when no claim comes), so a replay costs one round trip on its
// connection too. The first use of a statement on a connection adds one
// round trip to prepare it (ClaimTx prepares its batch's statements by
// name).
//
// A replay is cheapest when the store saw the key's record final before
// (it stored the outcome, or answered a claim with it): a store remembers
// that for up to 8,192 keys, in 64 KiB allocated on the first, and claims
// such a key with one plain SELECT of its live final record, in either
// mode, with no transaction and no lock. Only when that finds none (the record
// expired, was swept or forgotten meanwhile) does the claim run as above,
// one round trip later; the hint is then dropped. It picks the plan, never
// the answer: both plans read the database. A replay in a process that
// never saw the key final (a retry that reaches another instance) runs the
// claim above; that process then remembers the key. Partitioned stores
// keep no such hint. The hint, like the waits of duplicates in
// transactional mode, lives in the store value: create one store per
// table and process, and share it.
//
// Only the rare paths add a round trip: a claim that takes an expired record
// or a lapsed lease over, or repeats the caller's own claim (the first
// claim statement only inserts or reads; the full one takes over), a
// Complete or Release that changed nothing (to tell a repeat from a lost
// lease), a claim or COMMIT whose reply was lost.
//
// # Lease-mode claims
//
// A lease-mode Claim runs one statement for the usual cases:
// a fresh key is claimed by a plain insert, and a live record (a replay, a
// call in progress, another payload) is read by one index probe. Only when
// the key's row is takeable (expired, or a lapsed lease of the same
// payload), is the caller's own claim repeated, or was committed after the
// statement's snapshot, does it run a second statement: the full claim,
// which takes an expired record or a lapsed lease over, or returns the
// live record. The same request repeated (same token, same payload) while
// its record is PROCESSING is claimed again, so a caller may retry a claim
// whose reply it lost.
//
// A key whose record this store last saw final (it stored the outcome, or
// a claim answered with it) is read first with a plain SELECT of its live
// final record, the cheapest replay; only when there is none any more
// (expired, forgotten) does the claim run as above, one round trip later.
// The hint is kept for at most 8,192 keys, in 64 KiB allocated on the
// first, and never changes an answer. Partitioned stores keep
// none.
//
// When a statement was sent but its reply did not arrive (ctx expired, the
// connection broke), the claim may have committed after all, and the caller
// is told it failed: Claim then closes the connection, waits until the
// server session that received the statement has ended, and releases the
// claim it may have made (fenced by its token), so that the key is not
// blocked for the lease by a claim nobody runs.
//
// # Transactional claims
//
// Duplicates in this process: while a ClaimTx of this store claims a key
// or holds it (its transaction is open), another ClaimTx of the same key
// takes no connection. It waits for the first one's answer (one round
// trip) and shares it when it is a decided record and the duplicate was
// called before the first one sent its claim (a later one claims again
// after it: the answer, decided before its call, may be stale for it, a
// record that expired or was swept since); when the first one
// holds the key, it answers at once with a PROCESSING record of the
// holder's fingerprint and scheme (the executor reports idem.ErrInProgress,
// or idem.ErrPayloadMismatch for another payload), or, when its caller
// waits, waits in memory until the holder's transaction ends and then
// claims again (a replay of the committed outcome, or a claim of its own
// if the holder rolled back). A hot key thus holds at most one connection
// of the pool per process, whatever its number of duplicates.
//
// Otherwise it takes a connection from the pool; when all of them are in
// use, it waits at most wait or, when that is shorter, the store's acquire
// timeout (WithAcquireTimeout): when none frees up it returns an error
// wrapping idem.ErrStoreBusy (which matches idem.ErrStoreFull too), having
// claimed nothing.
//
// Then one batch, in one round trip, runs probe (probeSQL in the source; decide, in a partitioned or nested claim), the claim statement (a
// plain insert on the plain table), BEGIN and a savepoint. PostgreSQL runs
// a batch's statements as one transaction, implicit until BEGIN makes it
// explicit, keeping the lock and the claim (with the simple protocol too:
// one query string). probe returns the key's final record when one is
// visible (a replay, which takes no lock), or else tries the key's
// transaction-scoped advisory lock without waiting: when another
// transaction holds it, probe answers "busy" (decide also tells whether the
// holder runs the same payload; after probe a second round trip asks it,
// from the shared advisory lock the holder takes beside the key's). The
// claim statement claims only under the key's lock. No statement fails on
// purpose and none waits for a lock: a replay, a duplicate and a payload
// mismatch leave no error on the server. When the key is claimed, the
// returned Txn owns the transaction and its connection, and the lock is
// held until it ends. When it is not, the caller has its answer after that
// round trip (two for a key held by another process), and the transaction
// (which wrote nothing) is committed off the caller's path.
//
// A duplicate whose holder runs in another process (or another store
// value) is answered PROCESSING at once when wait is 0; otherwise it waits,
// off any connection, polling with a backoff from 1ms to 50ms until the
// holder's outcome is visible or wait has passed.
//
// Use one mode per table: a lease-mode claim on a key that a transactional
// claim holds waits for that transaction (bounded only by the lease-mode
// store's WithLockTimeout).
//
// # Nested claims
//
// A nested claim (ClaimNested) runs,  in one round trip on the outer claim's connection: the savepoint idem_nested, and
// the batch ClaimTx sends (decide, which answers a replay or tries the
// key's lock without waiting and without an error, the claim statement and
// the method's savepoint). When the key is claimed, the returned Txn holds
// it until the outer transaction ends: its Complete writes the outcome (after
// rolling back the method's writes for a final error) and releases the
// savepoint, without committing; its Release rolls back to the savepoint.
// When the key is not claimed (a replay, a call in progress, another
// payload: the answers of ClaimTx), a second round trip rolls back to the
// savepoint and releases it, so that the outer transaction holds nothing of
// the attempt, not even the key's lock. A key held by another transaction
// is looked at again, off the lock and with pauses that grow to
// 50ms, until wait has passed (wait 0: not at all, whatever
// WithLockTimeout): no statement fails while it waits, so the outer
// transaction stays usable.
//
// # Partitioned tables
//
// With [WithPartitions] the store keep its records in a table partitioned by
// time, one partition per interval, instead of one table swept row by row:
// Sweep drops a partition whole once every record in it has expired (its
// cost does not grow with the number of records) and creates partitions
// ahead of the clock. A record lives in the partition of its claim's expiry
// plus one interval, so that storing its outcome (which restarts its TTL)
// does not move it when the method takes less than an interval; an expired
// record behaves as absent at once and is dropped with its partition, at
// most two intervals after its expiry.
//
// A claim and a replay look the key up in each partition that may still
// hold a live record: about (TTL + interval) / interval + 1 of them. Choose
// an interval of about a quarter to an eighth of the longest TTL: shorter
// intervals mean more partitions per lookup, longer ones keep expired
// records longer. PostgreSQL cannot make a key unique across partitions
// (a unique index must contain the partition key), so every write that
// creates or extends a live record takes a transaction-scoped advisory lock
// on the key first (the lock transactional mode already takes): a key is
// claimed at most once while it is live, as in the plain table.
//
// Sweep, in this mode, detaches (CONCURRENTLY: claims go on) and drops
// every partition whose upper bound has passed, whatever its number of
// records (limit does not bound it: a drop costs the same for any), and
// creates the partitions ahead; it returns the number of records dropped as
// PostgreSQL's statistics estimate it (exact with WithArchive, which copies
// them first). Run it (or an idem.Sweeper) at least once an interval. A
// claim whose TTL reaches beyond the partitions created ahead creates the
// ones it needs first.
//
// interval must be a whole number of seconds and at least
// MinPartitionInterval; New panics otherwise. The table's layout differs
// from the plain one (PartitionedSchema): create it with Migrate, never on
// a table of the plain layout (Migrate refuses one). WithArchive copies the
// records of a partition into the archive table before dropping it.
//
// Use one mode per table.
package pgstore
