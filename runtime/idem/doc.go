// Package idem is the runtime of idemgen: the [Executor] that makes a call
// idempotent, the [Store] contract every idempotency store implements, and
// the key, fingerprint and codec helpers that generated wrappers use. It
// serves three audiences, in the sections below: service authors, callers
// (generated wrappers and hand-written code) and store authors.
//
// # Service authors
//
// Annotate a method with the key that identifies a request and how long its
// outcome is kept, run go generate, and construct the generated wrapper with
// an Executor on a store:
//
//	//idem:key=order.ID+op ttl=155s
//	func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error)
//
//	ex := idem.NewExecutor(pgstore.New(pool), idem.WithTenant(auth.Subject))
//	svc := NewIdempotentOrderService(&OrderService{db}, ex)
//	rcpt, err := svc.Pay(ctx, order, "pay") // a retry with the same key replays rcpt
//
// The tenancy is chosen where the executor is built: [WithTenant] scopes
// records by the caller, [SingleTenant] puts every caller in one key space;
// [NewExecutor] panics without exactly one of them.
//
// The stores are runtime/memstore (one process), runtime/pgstore,
// runtime/redisstore, runtime/tiered (Redis in front of PostgreSQL) and
// runtime/sqlitestore. [NewExecutor] takes options: [WithTenant] (records
// are scoped by tenant: set it in a multi-tenant service), [WithLease],
// [WithRenewal], [WithStoreTimeout], [WithCodec], [WithClock], and for
// observability [WithObserver] with [LogEvents], or [WithCallHook]
// (runtime/idemotel; a hook whose observer is an [OriginObserver] keeps the
// trace origin of each stored outcome in its [Outcome.Meta], see
// [CallMeta], so that a replay links to the call that ran). An invalid
// option makes NewExecutor panic, since the mistake is in the program, not
// in a request.
//
// What the method returns decides what retries see: a result is stored and
// replayed; an error marked with [Final] (or a sentinel listed in the
// annotation's final=) is stored and replayed as a [*ReplayedError]; any
// other error releases the key, so that a retry runs the method again.
// Callers tell the outcomes apart with errors.Is: [ErrInProgress] (a
// duplicate of a running call), [ErrPayloadMismatch] (the key reused with
// another payload), [ErrMissingKey], [ErrLeaseLost], [ErrOutcomeNotStored],
// [ErrFinal] and the other Err variables. A store that could not be used
// before the method ran (down, full, or its schema never migrated:
// [ErrStoreSchema]) is an error wrapping [ErrStoreUnavailable] beside the
// store's own: the method did not run, and no error of the method ever
// wraps it. Its message names the operation, the store call and the key's
// hex ID once:
//
//	idem: billing.Service.Pay: claim: store unavailable, the method did not run: pgstore: claim 98f0…: failed to connect …
//
// A caller that must know whether its result was replayed (to send an email
// or count revenue once) asks with [WithCallInfo]:
//
//	ctx, info := idem.WithCallInfo(ctx)
//	rcpt, err := svc.Pay(ctx, order, "pay")
//	if err == nil && !info.Replayed() {
//		sendReceipt(rcpt) // the first run's result, not a retry's replay
//	}
//
// A call without a CallInfo pays no allocation for it: Do reads the
// CallInfo, the tenant and the rest of what it takes from the context in
// one walk of the context's chain.
//
// # Callers: generated wrappers and hand-written code
//
// A wrapper builds the call's key with [KeyParts] and the request's
// fingerprint with [Hasher], both on its stack, and calls [Do] with the
// [Method] the annotation describes; Do claims the key, runs the method
// once, stores its outcome and replays it to every retry. Hand-written code
// calls Do the same way ([NewKey] builds a [Key] from strings for other
// uses). Inside the method, [KeyFrom] returns the call's key (its hex ID),
// and [Derive] turns it into stable keys for downstream calls;
// [ContextWithKey] sets it where work is made idempotent by other means.
//
// In short, Do guarantees (the sections below give the details):
//
//   - Concurrent duplicates run the method once; the others get
//     ErrInProgress, or the outcome with Method.Wait.
//   - A retry gets the stored result or final error; the same key with
//     another payload gets ErrPayloadMismatch.
//   - The method's own transient error, a panic or runtime.Goexit releases
//     the key so that a retry runs it again. Nothing else does once the
//     method has run: an outcome that cannot be stored (the codec refuses
//     it, it exceeds MaxOutcomeLen, the store refuses it) is replaced by a
//     final outcome with the code NotStoredCode, whose replay matches
//     ErrOutcomeNotStored.
//   - A store in an outage after the method ran (lease mode: it cannot be
//     reached, or it answers with an error that can pass, such as a
//     read-only database during a failover or a full disk; see
//     [ErrStoreOutage]) is retried, with backoff on the Clock, fenced by the claim's token and
//     renewing the lease where the store can (Renewer), for as long as the
//     claim can be live: an outage shorter than the lease loses nothing and
//     runs nothing twice. The caller gets its result once the outcome is
//     stored, or, if its context ends first, an [*OutcomePendingError]
//     (ErrOutcomePending, also ErrInProgress) while a goroutine goes on.
//     In lease mode, a store outage longer than the lease after the method
//     ran can run it again; transactional mode cannot.
//   - Every store call is safe to repeat after a lost reply: a Claim is
//     retried with the same token and abandoned with a Release of that
//     token; a Complete is retried and a store answers the repetition of a
//     stored outcome with success.
//   - A claim holds for a lease; a worker whose lease was taken over cannot
//     store its outcome (ErrLeaseLost). WithRenewal (or Method.Renew) keeps
//     renewing the lease while the method runs, so that only a stalled
//     process loses it.
//   - Records carry their fingerprint scheme (Method.Scheme): a retry whose
//     fingerprint was computed by another release is replayed, not refused.
//   - A stale generated wrapper (its method or a type it keys or hashes by
//     changed, and go generate was not run) does not build: the generated
//     file's layout checks fail, quoting StaleRunGoGenerate. Where the
//     compiler cannot see the change, CheckLayout finds it when the package
//     is initialized and every call returns ErrStaleWrapper (Method.Stale)
//     without running the method.
//
// Misuse fails early and names its cause: Do returns [ErrMisconfigured] for
// invalid Method values (TTL > 0, Lease and Wait >= 0 and Lease <= TTL are
// required), and for a second method (another [Method.Func])
// under an operation name the executor has run, whose records would answer
// the first one's calls; and [ErrTooLarge] for a tenant or operation name
// over the store limits; all before anything is claimed.
//
// Errors and the default log ([LogEvents]) name a key by its hex ID
// ([Key.Hex]), never by the caller's key text or tenant, which may carry
// personal data; [LogEventsWithKeys] logs those too, and [Event.Key]
// carries them for an observer that wants them.
//
// Every wait the executor makes (a duplicate waiting, backoff between store
// retries, lease renewal) goes through its [Clock], so tests and
// simulations run it in virtual time; lease and expiry instants come from
// the store's clock.
//
// # Outcomes that cannot be stored
//
// Once the method has run, nothing but its own transient error releases the key. An
// outcome that cannot be stored (the codec refuses the result, such as NaN,
// ±Inf or a cycle in JSON; it exceeds [MaxOutcomeLen]; the store refuses it
// after its retries, with an answer that cannot pass, not an outage) is
// replaced by a final outcome with the code [NotStoredCode]: the caller gets
// the method's own result, the observer is told ([EventOutcomeNotStored]), and
// retries get an error matching [ErrOutcomeNotStored] instead of running the method
// again. A stored outcome that no longer decodes into the result type is an
// error matching [ErrUndecodable] with the zero value.
//
// # Store outages
//
// A store in an outage after the method ran (lease mode: one that cannot be reached,
// or answers with an error that can pass, such as a read-only database
// during a failover, a full disk, too many connections; see
// [ErrStoreOutage]) gets no substitute: the executor keeps trying to store
// the outcome, with backoff on its [Clock], fenced by the claim's token,
// renewing the lease where the store can ([Renewer]), for as long as the
// claim can be live (a lease after the reply of its claim or last renewal),
// so that an outage shorter than the lease loses nothing and runs nothing
// twice, whichever way the store failed; a claim to release after a
// transient error is released the same way. Each attempt is bounded by the store timeout ([WithStoreTimeout]).
//
// The caller gets the method's result once the outcome is stored. If the caller's
// context ends first, it gets an [*OutcomePendingError] (matching
// [ErrOutcomePending] and [ErrInProgress], with RetryAfter) and a goroutine
// goes on storing it; a retry meanwhile finds the live claim and gets
// ErrInProgress (or, with Method.Wait, waits for the outcome). If the claim
// can no longer be live first, the executor stops: the caller still gets
// the method's result, the observer a store error, and a retry runs the method again. In
// lease mode, a store outage longer than the lease after the method ran can
// run it again; transactional mode cannot. A Complete answered with
// [ErrLeaseLost] stops at once: the caller gets ErrLeaseLost.
//
// When the caller's context ends while Do claims or waits, the error wraps
// the context's error and the observer gets [EventCanceled], not a store
// error.
//
// # Lost replies
//
// In lease mode a Claim that fails is retried with the same token (stores
// answer a repeated claim of the caller's own token as claimed), and when
// the executor gives up it releases that token's claim, best effort, so that
// a claim applied by the store is not left blocking the key for its lease
// (in transactional mode a failed ClaimTx committed nothing). A Complete
// that fails is retried; a store answers a repeated Complete of the token
// whose outcome it holds with success, so a lost reply never turns a stored
// outcome into ErrLeaseLost.
//
// # Deploys
//
// When the fingerprints of a record and a call differ but the record and the
// [Method] carry different non-zero Schemes, the fingerprints were computed
// by different releases of the wrapper, not from different payloads: the
// record is replayed ([EventSchemeChanged]), and a lapsed claim of the old
// scheme is taken over, instead of [ErrPayloadMismatch].
//
// # Transactional mode
//
// With a store that implements [TxStore], the claim, the method's own writes and the
// outcome commit as one transaction. A final error is stored without the
// method's writes (they are rolled back, the outcome committed); a
// transient error, a panic, runtime.Goexit or a cancelled context roll the
// whole transaction back. A substitute outcome (see Outcomes that cannot be
// stored) is committed with the method's writes (a success) or without them
// (a final error). A commit that fails commits
// nothing, and the caller gets the store's error, never the method's success.
//
// # Tenancy
//
// [NewExecutor] requires exactly one of [WithTenant] (records scoped by the
// caller) and [SingleTenant] (one key space for every caller). Without a
// choice a multi-tenant service would answer tenant B's order 1 with tenant
// A's stored outcome, so NewExecutor refuses to guess.
//
// The door that authenticates a caller (idemhttp, the framework adapters,
// idemgrpc, the consumer, the gateway) names its tenant once with
// [ContextWithTenant]; every executor, wrapper and nested call below it
// scopes its records by that tenant:
//
//   - under SingleTenant, the executor takes the context's tenant when one
//     is there (a single-tenant executor behind a tenant-scoped door keeps
//     the door's tenants apart), and the shared tenant "" otherwise;
//   - under WithTenant(f), f's tenant and the context's must agree: f
//     returning "" takes the context's, and two different names fail with
//     [ErrTenantConflict].
//
// A tenant of "" in the context fails every call below it with
// [ErrMissingTenant].
//
// # Lease renewal
//
// With [WithRenewal] (or Method.Renew), in lease mode, while the method runs
// the executor renews the claim through the store's Renew ([Renewer], fenced
// by the claim's token) every third of the lease, so that only a stalled
// process, not a slow method, loses its key to a takeover. Renewal stops
// when the method returns. If a renewal finds the claim taken
// ([ErrLeaseLost]), the method's context is cancelled with the cause
// ErrLeaseLost (context.Cause), so that a method that watches its context
// stops before its side effect, and the error Do returns wraps ErrLeaseLost
// whatever the method returned; a renewal that fails otherwise is reported
// ([EventStoreError]) and tried again at the next third.
//
// With renewal on, the first lease also covers the caller's deadline, when
// its context has one: the lease is the larger of the configured lease and
// the time until the deadline (by the executor's Clock) plus the store
// timeout, capped at the TTL. A store in transactional mode ([TxStore])
// holds its claim in the transaction and needs no renewal: there, renewal
// does nothing. Renewal runs in a goroutine of its own while the method
// runs, and waits on the executor's Clock.
//
// # The life of a record
//
// A record is found by its [Key] (tenant, operation and the SHA-256 of the
// key parts) and is in one of three states ([Status]):
//
//	absent ──Claim──▶ PROCESSING ──Complete(token)──▶ SUCCEEDED | FAILED_FINAL
//	                  │   ▲    │                          │
//	                  │   └────┘ takeover: lease lapsed,  │
//	                  │          same fingerprint,        │
//	                  │          fresh token              │
//	                  ▼ Release(token) or TTL             ▼ TTL
//	                absent                              absent
//
// The transitions:
//
//   - Claim on an absent (or expired) key creates a PROCESSING record that
//     holds the caller's fencing [Token] for a lease; the caller runs the
//     method. A claim that finds a live record changes nothing and returns
//     it: a final record is replayed (or refused on another fingerprint), a
//     PROCESSING one answers ErrInProgress.
//   - Complete stores the [Outcome] (SUCCEEDED with the encoded result, or
//     FAILED_FINAL with the final error) only while the record holds the
//     caller's token; the record then lives until its TTL.
//   - Release deletes the PROCESSING record of the caller's token (a
//     transient error, a panic, a cancelled call), so that the next claim
//     runs the method again.
//   - Takeover: once a PROCESSING record's lease has lapsed (a crashed or
//     stalled worker), a Claim with the same fingerprint takes it over with
//     a fresh token. The old worker's Complete, Release or Renew then fails
//     with ErrLeaseLost (fencing): it can no longer store its outcome.
//   - Expiry: past its TTL a record behaves as absent, and a store's Sweep
//     ([Sweepable], run by a [Sweeper]) removes it in bounded batches.
//
// Lease and TTL are durations measured by the store's clock, never
// instants from the caller's. In transactional mode ([TxStore]) the claim,
// the method's own writes and the outcome commit as one transaction, so a
// PROCESSING record is never visible to others.
//
// # Store authors
//
// A store implements [Store]: Claim, Complete and Release, each atomic for
// its key, on the types [ClaimRequest], [Claim], [Record], [Outcome],
// [Token] and [Fingerprint], within the limits [MaxTenantLen], [MaxOpLen]
// and [MaxOutcomeLen] (larger values are refused with ErrTooLarge, a full
// store refuses new claims with [ErrStoreFull], a fenced-out caller gets
// ErrLeaseLost). Each method's documentation is the contract, and
// runtime/idemtest checks it: call idemtest.Run from the store's tests.
// [Outcome.Meta] is the executor's (see [ParseMeta]): a store keeps it byte
// for byte and never reads it.
//
// Optional capabilities are interfaces of their own, found by type
// assertion: [TxStore] and [Txn] (transactional mode), [Renewer] (lease
// renewal), [Seeder] (a tier that takes in records decided elsewhere,
// runtime/tiered), [Sweepable] (expiry in bounded batches), [LocalStore]
// (no I/O: no deadline needed) and [BoundedStore] (calls return promptly at
// their deadline). A store that wraps another forwards the ones it can.
package idem
