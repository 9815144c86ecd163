package idem

import (
	"context"
	"strconv"
	"time"
)

// Status is the state of an idempotency record.
type Status uint8

const (
	// StatusProcessing: a worker holds the claim under a lease and is running
	// the method. Nothing can be replayed yet.
	StatusProcessing Status = iota + 1
	// StatusSucceeded: the method returned a result; it is replayed to retries.
	StatusSucceeded
	// StatusFailedFinal: the method returned a final (business) error; it is
	// replayed to retries as an error that is errors.Is-equal to the original
	// sentinel.
	StatusFailedFinal
)

// String returns the upper-case name used in the articles and in stored rows.
func (s Status) String() string {
	switch s {
	case StatusProcessing:
		return "PROCESSING"
	case StatusSucceeded:
		return "SUCCEEDED"
	case StatusFailedFinal:
		return "FAILED_FINAL"
	default:
		return "Status(" + strconv.Itoa(int(s)) + ")"
	}
}

// Token is a fencing token. Every claim, including the takeover of a lapsed
// lease, carries a fresh token; Complete and Release succeed only while the
// record still holds the caller's token, so a worker whose lease was taken
// over cannot overwrite the new owner's outcome.
type Token uint64

// Fingerprint identifies the payload of a request: the SHA-256 of its
// canonical encoding. Same key with a different fingerprint is a conflict.
type Fingerprint [32]byte

// ClaimRequest asks a store to claim a key.
//
// Durations, not instants, are passed on purpose: a store computes lease and
// expiry instants from its own clock (Postgres now(), Redis PX), never from
// the client's.
type ClaimRequest struct {
	Key         Key
	Fingerprint Fingerprint
	// Token is the fencing token to record when the claim succeeds. The
	// executor draws it at random; stores compare it for equality only.
	Token Token
	// Lease is how long the claim holds before another caller may take it
	// over. Lease <= TTL.
	Lease time.Duration
	// TTL is how long the record lives from now.
	TTL time.Duration
	// Scheme identifies how Fingerprint was computed (which values, in which
	// encoding); 0 means unknown. Stores keep it with the record and return
	// it in Record.Scheme, so that a retry whose fingerprint was computed by
	// another release (a rolling deploy) is recognised instead of being
	// refused as a different payload.
	Scheme uint32
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	// Claimed is true when the caller now owns the key: there was no live
	// record, or a PROCESSING record with the same fingerprint whose lease had
	// lapsed was taken over (TakenOver is then true).
	Claimed   bool
	TakenOver bool
	// Record is the live record that prevented the claim (when !Claimed).
	Record Record
}

// Record is a live idempotency record as a store returns it. Its Outcome's
// slices may be the store's own: callers read them and never modify them.
type Record struct {
	Status      Status
	Fingerprint Fingerprint
	// Scheme is the ClaimRequest.Scheme of the claim that created the record.
	Scheme uint32
	Token  Token
	// LeaseLeft is how long, by the store's clock, until a PROCESSING
	// record's lease lapses; 0 when it has lapsed or the record is final.
	LeaseLeft time.Duration
	// Outcome is set for SUCCEEDED and FAILED_FINAL records.
	Outcome Outcome
}

// Outcome is what is stored when a call ends, and replayed to retries.
type Outcome struct {
	// Status is StatusSucceeded or StatusFailedFinal.
	Status Status
	// Body is the codec's encoding of the result (StatusSucceeded).
	Body []byte
	// ErrCode names the final error's sentinel (StatusFailedFinal), as
	// written in the annotation's final= list; empty for an idem.Final error.
	ErrCode string
	// ErrMessage is the final error's Error() text.
	ErrMessage string
	// Meta is the executor's metadata of the call that stored the outcome
	// (see CallMeta and ParseMeta: a version byte, then fields, such as
	// the call's trace origin when its CallObserver is an OriginObserver);
	// empty when there is none, as in every record written before it
	// existed. Stores keep it byte for byte and never read it; it counts
	// towards MaxOutcomeLen.
	Meta []byte
}

// Store is the contract every idempotency store implements, and that
// idemtest.Run checks. All three methods are atomic with respect to each other
// for the same key; records of different keys are independent.
type Store interface {
	// Claim atomically creates a PROCESSING record holding req.Token, with a
	// lease of req.Lease and an expiry of req.TTL from the store's now, when
	// the key has no live record (absent, or past its expiry), or takes over a
	// PROCESSING record whose lease has lapsed and whose fingerprint equals
	// req.Fingerprint. Otherwise it changes nothing and returns the live
	// record. Exactly one of many concurrent claims on a free key succeeds.
	//
	// A Claim repeated by the token that holds the PROCESSING record (same
	// fingerprint; a retry whose first reply was lost) answers Claimed and
	// sets the lease afresh to req.Lease from the store's now, never beyond
	// the record's expiry: the record still holds the token, so nobody took
	// the key over, and the caller is about to start the method.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)

	// Complete atomically replaces the PROCESSING record holding token with
	// out, to expire ttl from the store's now. If the record is gone, final,
	// or holds another token, it changes nothing and returns ErrLeaseLost.
	//
	// out's slices (Body, Meta) become the store's: the caller does not
	// modify them after the call, so a store may keep them without a copy
	// (the executor passes the codec's fresh encoding).
	Complete(ctx context.Context, key Key, token Token, out Outcome, ttl time.Duration) error

	// Release atomically deletes the PROCESSING record holding token, so the
	// next claim executes again. If the record holds another token or is
	// final, it changes nothing and returns ErrLeaseLost.
	Release(ctx context.Context, key Key, token Token) error
}

// TxStore is implemented by stores that can run the claim, the wrapped
// method's own writes and the outcome as one transaction (pgstore in
// transactional mode). The executor uses ClaimTx instead of Claim when its
// store implements TxStore.
type TxStore interface {
	Store
	// ClaimTx is Claim inside a new transaction. When the key is claimed, the
	// returned Txn owns the transaction and must be ended with exactly one
	// call to Complete or Release; otherwise Txn is nil and nothing is left
	// open. A concurrent duplicate waits on the claimed row for at most wait
	// (0 means do not wait) and then sees the committed outcome.
	ClaimTx(ctx context.Context, req ClaimRequest, wait time.Duration) (Claim, Txn, error)
}

// Txn is a claim held inside a store transaction.
type Txn interface {
	// Context returns ctx carrying the transaction, so that the method writes
	// its business rows through it (see pgstore.TxFrom).
	Context(ctx context.Context) context.Context
	// Complete stores out and commits. With discardWrites (a final error)
	// the method's own writes are rolled back first and only the record is
	// committed.
	Complete(ctx context.Context, out Outcome, ttl time.Duration, discardWrites bool) error
	// Release rolls the whole transaction back: no record, no business write.
	Release(ctx context.Context) error
}

// The optional capabilities of a store, each an interface of its own
// methods only (as in database/sql/driver): the executor, runtime/tiered
// and the Sweeper find them by a type assertion on the store. A store that
// wraps another forwards the ones it can (the methods that answer a bool
// let a wrapper answer for what it wraps). Seeder and Sweepable are
// declared beside their users (seeder.go, sweeper.go).

// Renewer is implemented by stores that can extend a claim's lease while
// the method runs, so that a slow method (rather than a stalled process)
// does not lose its key to a takeover. The executor renews through it when
// lease renewal is on (WithRenewal, Method.Renew).
type Renewer interface {
	// Renew atomically sets the lease of the PROCESSING record holding token
	// to lease from the store's now (never beyond the record's expiry). If
	// the record is gone, final, or holds another token, it changes nothing
	// and returns ErrLeaseLost.
	Renew(ctx context.Context, key Key, token Token, lease time.Duration) error
}

// LocalStore is implemented by stores that may answer from process memory
// without blocking on I/O (memstore). When Local returns true, the
// executor calls the store without the deadline (WithStoreTimeout) it puts
// on the store calls it makes after the method ran and on lease renewals:
// such a call cannot hang, and the deadline would cost a timer per call.
// It also passes such a store keys whose Text is empty unless an observer
// or a CallHook is set: a local store keeps nothing for operators to read,
// and the readable text costs an allocation per call.
type LocalStore interface {
	// Local reports whether every call of the store returns without
	// blocking on I/O. The executor asks once, in NewExecutor.
	Local() bool
}

// BoundedStore is implemented by stores that can tell whether their calls
// return promptly once their context's deadline has passed (redisstore
// judges it from its client's options). runtime/tiered calls a fast store
// on the caller's goroutine, with its fast timeout as the deadline, when
// BoundedBy(that timeout) is true, and on a goroutine it can stop waiting
// for otherwise; the executor does not use it.
type BoundedStore interface {
	// BoundedBy reports whether every call returns within about d of its
	// context's deadline (including the wait for a connection, a dial and
	// retries). False when the store cannot tell.
	BoundedBy(d time.Duration) bool
}

// StoreEvent is an event a store reports of its own workings, beside the
// executor's Events: tiered's fast tier failing, degraded, recovered or
// repaired (tiered.Event). Observers that count store events
// (idemotel.TieredObserver) take any store's event type through it, so that
// an observer package imports the core, not the store.
type StoreEvent interface {
	// StoreOperation is the store call the event happened in: "claim",
	// "complete", "release", "renew", "seed".
	StoreOperation() string
	// StoreEventName is the event's name, in snake case ("degraded").
	StoreEventName() string
}
