// Package idem is the runtime of idemgen: the Executor that makes a call
// idempotent, the Store contract that every idempotency store implements,
// and the key, fingerprint and codec helpers that generated wrappers use.
//
// A generated wrapper (or a hand-written caller) builds the call's key
// (KeyParts) and request fingerprint (Hasher) and calls Do, which claims the
// key in the store, runs the method once, stores its outcome and replays it
// to every retry. See Do for the full behaviour; in short:
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
//
// Misuse fails early and names its cause: NewExecutor panics on an invalid
// option, and Do returns ErrMisconfigured for invalid Method values and
// ErrTooLarge for a tenant or operation name over the store limits, before
// anything is claimed.
//
// Every wait the executor makes (a duplicate waiting, backoff between store
// retries, lease renewal) goes through its Clock, so tests and simulations
// run it in virtual time; lease and expiry instants come from the store's
// clock. Events (WithObserver, LogEvents) report what happened to each call.
package idem
