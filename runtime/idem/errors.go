package idem

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrInProgress: the key is held by a call that is still running. Retry
	// after the lease (errors.As to *InProgressError for RetryAfter).
	ErrInProgress = errors.New("idem: request with this key is in progress")
	// ErrPayloadMismatch: the key was used before with a different payload.
	// It is a conflict, never a replay.
	ErrPayloadMismatch = errors.New("idem: key reused with a different payload")
	// ErrMissingKey: a key part is nil or empty; the method was not called.
	ErrMissingKey = errors.New("idem: missing key part")
	// ErrLeaseLost: the claim's lease lapsed and another worker took the key
	// over (or the record is gone); this worker's outcome was not stored.
	ErrLeaseLost = errors.New("idem: lease lost to another worker")
	// ErrStoreFull: the store is at its configured capacity and refuses new
	// claims; no live record was dropped to make room. The method was not
	// called; retry later.
	ErrStoreFull = errors.New("idem: store is full")
	// ErrTooLarge: a tenant, operation name or stored outcome exceeds the
	// limits every store accepts (MaxTenantLen, MaxOpLen, MaxOutcomeLen).
	ErrTooLarge = errors.New("idem: value exceeds the store limits")
	// ErrFinal matches, through errors.Is, every final error: one marked with
	// Final, one matching a final= sentinel (Do marks it on the first call
	// too), and every replayed one.
	ErrFinal = errors.New("idem: final error")
	// ErrOutcomeNotStored is what retries get (errors.Is also matches
	// ErrFinal) when the method ran but its outcome could not be stored: the
	// codec refused the result (NaN, ±Inf, a cycle), the outcome exceeded
	// MaxOutcomeLen, or the store refused it. Instead of releasing the key,
	// which would run the method again, the executor stored a final outcome
	// with the code NotStoredCode; the first caller got the method's own
	// result. The key stays decided until its TTL.
	ErrOutcomeNotStored = errors.New("idem: the call ran but its outcome could not be stored")
	// ErrOutcomePending: the method ran (lease mode), but its outcome is not
	// stored yet: the store was in an outage (see ErrStoreOutage), and the caller's context
	// ended before it could. The executor goes on storing it, in the
	// background, for as long as the call's claim can be live; a retry
	// meanwhile gets ErrInProgress, then the stored outcome. The error is an
	// *OutcomePendingError, which errors.Is also matches with ErrInProgress:
	// retry after its RetryAfter, as after any ErrInProgress.
	ErrOutcomePending = errors.New("idem: the call ran but its outcome is not stored yet")
	// ErrUndecodable: a stored result no longer decodes into the method's
	// result type (a deploy changed the type or the codec). The method was
	// not called and the caller gets the zero value; the record stays until
	// its TTL.
	ErrUndecodable = errors.New("idem: stored result does not decode into the result type")
	// ErrMisconfigured: a Method's values are invalid (TTL <= 0, a negative
	// Lease or Wait, Lease > TTL), it asks for lease renewal on a store
	// that cannot renew, or its Op was already run on the executor by
	// another method (another Func). Nothing was claimed and the method was
	// not called;
	// a retry fails the same way. Executor options are checked earlier, by
	// NewExecutor.
	ErrMisconfigured = errors.New("idem: misconfigured method")
	// ErrStoreUnavailable: the store could not be used before the method
	// ran (it could not be reached, it failed, it is full, or its schema is
	// missing), so the method did not run; retry later with the same key.
	// Every error the executor returns for a store call that failed before
	// the method ran wraps it, beside the store's own error; an error of the
	// method itself never does. The one exception is a store's refusal of
	// the caller's own input (ErrTooLarge).
	ErrStoreUnavailable = errors.New("idem: store unavailable, the method did not run")
	// ErrStoreSchema: the store's tables are missing or older than the
	// store's code (a database that was never migrated, or migrated by an
	// older release); the store's Migrate method creates or updates them.
	// SQL stores wrap it, naming the Migrate call, and the executor does not
	// retry it: retrying cannot help until the schema is migrated.
	ErrStoreSchema = errors.New("idem: the store's schema is missing or outdated")

	// ErrStaleWrapper: the generated wrapper was generated for other types
	// than those the program was built with (its hashed parameters' layout
	// changed since, and go generate was not run): Do refuses every call,
	// before anything is claimed, rather than compare fingerprints computed
	// for another layout. Run go generate. See CheckLayout.
	ErrStaleWrapper = errors.New("idem: stale wrapper")
)

// ErrStoreBusy is returned when the store could not take the call in time
// because what it serves calls with is all in use by running calls
// (pgstore in transactional mode: every connection of its pool); the store
// is not full. Nothing was claimed and the method was not called; retry shortly.
// For callers written before it, it also matches ErrStoreFull
// (errors.Is(ErrStoreBusy, ErrStoreFull) is true): test ErrStoreBusy first
// to tell the two apart.
var ErrStoreBusy error = storeBusy{}

type storeBusy struct{}

func (storeBusy) Error() string { return "idem: store is busy (all its connections are in use)" }

// Is makes ErrStoreBusy match ErrStoreFull.
func (storeBusy) Is(target error) bool { return target == ErrStoreFull }

// NotStoredCode is the Outcome.ErrCode of the final outcome the executor
// stores when a call's own outcome could not be stored (see
// ErrOutcomeNotStored). Its replay matches ErrOutcomeNotStored and ErrFinal.
const NotStoredCode = "idem:unstorable"

// Limits every store accepts: any byte string (NUL bytes and invalid UTF-8
// included) up to these sizes. The executor refuses larger values with
// ErrTooLarge before it claims, and stores refuse them with ErrTooLarge.
const (
	// MaxTenantLen is the longest tenant, in bytes.
	MaxTenantLen = 1024
	// MaxOpLen is the longest operation name, in bytes.
	MaxOpLen = 1024
	// MaxOutcomeLen is the largest Outcome (Body, ErrCode, ErrMessage and
	// Meta together), in bytes.
	MaxOutcomeLen = 64 << 20
)

// InProgressError is returned (wrapping ErrInProgress) while another call
// holds the key.
type InProgressError struct {
	Key Key
	// RetryAfter is how long until the holder's lease lapses, by the store's
	// clock; when the store cannot tell (a transactional store whose holder
	// has not committed yet), the lease of the refused call's method, the
	// longest a call of it is meant to hold the key. It is 0 only in an
	// InProgressError made by hand.
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v (key %s, retry after %v)", ErrInProgress, e.Key.Hex(), e.RetryAfter)
	}
	return fmt.Sprintf("%v (key %s)", ErrInProgress, e.Key.Hex())
}

// Unwrap returns ErrInProgress.
func (e *InProgressError) Unwrap() error { return ErrInProgress }

// OutcomePendingError is returned (matching ErrOutcomePending and
// ErrInProgress) when the method ran but its outcome could not be stored
// before the caller's context ended, because the store was in an outage
// (lease mode; see ErrStoreOutage). The executor keeps trying to store it, fenced by the
// call's token, until it is stored or the claim's lease has ended. Retrying
// the call is safe: while the claim is live a retry gets ErrInProgress (the
// method does not run again), and once the outcome is stored, the outcome.
// Only if the outage lasts past the lease can a retry after
// RetryAfter run the method again (the documented limit of lease mode).
type OutcomePendingError struct {
	Key Key
	// RetryAfter is how long until the claim's lease ends at the latest,
	// by the executor's clock: by then the outcome is stored, or the
	// executor has given up.
	RetryAfter time.Duration
	// Cause is why the caller stopped waiting (context.Cause of its
	// context).
	Cause error
	// Err is the store's last error.
	Err error
}

func (e *OutcomePendingError) Error() string {
	return fmt.Sprintf("%v (key %s; the caller stopped waiting: %v; the store: %v; the executor keeps trying for %v)",
		ErrOutcomePending, e.Key.Hex(), e.Cause, e.Err, e.RetryAfter)
}

// Unwrap returns ErrOutcomePending and ErrInProgress: the caller's context
// error and the store's error are in the message only, so that the call
// does not look cancelled or failed (it ran).
func (e *OutcomePendingError) Unwrap() []error { return []error{ErrOutcomePending, ErrInProgress} }

// MissingKeyError is returned (wrapping ErrMissingKey) when a key part is nil
// or empty.
type MissingKeyError struct {
	Op   string
	Path string // the key part as written in the annotation, e.g. "order.ID"
}

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("idem: %s: key part %s is nil or empty", e.Op, e.Path)
}

// Unwrap returns ErrMissingKey.
func (e *MissingKeyError) Unwrap() error { return ErrMissingKey }

// mismatchError is ErrPayloadMismatch for one call: it names the operation,
// as MissingKeyError does, and the key's hex ID.
type mismatchError struct{ key Key }

func (e *mismatchError) Error() string {
	return fmt.Sprintf("idem: %s: key %s reused with a different payload", e.key.Op, e.key.Hex())
}

func (e *mismatchError) Unwrap() error { return ErrPayloadMismatch }

// storeError is a store call of the executor that failed. Its message
// names the operation, the call and the key's hex ID once (a store's error
// names the key already, see idemtest's ErrorsWrapSentinelAndNameKey):
//
//	idem: billing.Service.Pay: claim: store unavailable, the method did not run: pgstore: claim 98f0…: failed to connect …
//
// With before set (the method did not run), it wraps ErrStoreUnavailable
// beside the store's error.
type storeError struct {
	key    Key
	call   string // claim, complete, commit, waiting for, …
	before bool
	err    error
}

func (e *storeError) Error() string {
	var b strings.Builder
	b.WriteString("idem: ")
	b.WriteString(e.key.Op) // at most MaxOpLen: Do checks it before any store call
	b.WriteString(": ")
	b.WriteString(e.call)
	cause := e.err.Error()
	if hex := e.key.Hex(); !strings.Contains(cause, hex) {
		b.WriteString(" key ")
		b.WriteString(hex)
	}
	b.WriteString(": ")
	if e.before {
		b.WriteString(strings.TrimPrefix(ErrStoreUnavailable.Error(), "idem: "))
		b.WriteString(": ")
	}
	b.WriteString(cause)
	return b.String()
}

// Unwrap returns the store's error, and ErrStoreUnavailable when the method
// did not run.
func (e *storeError) Unwrap() []error {
	if e.before {
		return []error{ErrStoreUnavailable, e.err}
	}
	return []error{e.err}
}

// Final marks err as a final (business) outcome: the executor stores it and
// replays it to retries instead of releasing the key. Final(nil) is nil.
//
// The replay is a *ReplayedError with the same message. errors.Is(replay,
// ErrFinal) always holds; errors.Is(replay, ErrX) holds when ErrX is a
// sentinel the Method lists, in Final or in Sentinels: for generated
// wrappers, the final= list and every exported error variable of the
// service's package. A sentinel of another package that is not in final=,
// and anything errors.As would find (a custom error type's fields), does not
// survive the replay: only the message and the first listed sentinel that
// the error matches are stored.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err: err}
}

type finalError struct{ err error }

func (e *finalError) Error() string   { return e.err.Error() }
func (e *finalError) Unwrap() []error { return []error{e.err, ErrFinal} }

// ReplayedError is the error a retry receives when the first call ended with
// a final error. It has the original message, and errors.Is matches ErrFinal
// and the sentinel the original error matched, when the Method lists it (in
// Final or Sentinels; see Final). Code is the sentinel's stored name.
type ReplayedError struct {
	Code     string
	Message  string
	sentinel error
}

func (e *ReplayedError) Error() string { return e.Message }

// Unwrap returns the sentinel, when it is known, and ErrFinal.
func (e *ReplayedError) Unwrap() []error {
	if e.sentinel != nil {
		return []error{e.sentinel, ErrFinal}
	}
	return []error{ErrFinal}
}

// TenantQuotaError is returned (wrapping ErrStoreFull) when a store refuses
// a new claim because the claim's tenant holds its whole share of the store
// (memstore.WithTenantShare, redisstore.WithTenantShare), while the store
// itself may still have room for other tenants. As with every ErrStoreFull,
// nothing was claimed and the method was not called; the tenant may retry
// once its records expire. idemhttp answers it with 429 (rule
// "tenant-over-quota") instead of the 503 of a full store.
type TenantQuotaError struct {
	// Tenant is the tenant refused (Key.Tenant of the claim).
	Tenant string
	// Share is the number of records the tenant may hold (for redisstore:
	// create per window, see its WithTenantShare).
	Share int64
}

func (e *TenantQuotaError) Error() string {
	return fmt.Sprintf("%v: the tenant's share of %d records is used", ErrStoreFull, e.Share)
}

// Unwrap returns ErrStoreFull.
func (e *TenantQuotaError) Unwrap() error { return ErrStoreFull }

// NotStorable wraps err, the reason, for a method to return when it ran and
// had its effects but its result must not be stored: an HTTP response
// larger than the door stores, or an upstream that may have acted and
// whose answer was lost. The executor does what it does for a result it
// cannot encode: it stores the final NotStoredCode outcome (in
// transactional mode, committing the method's writes), tells the observer
// EventOutcomeNotStored with the error, and returns the error, marked
// Final, to the caller; retries get an error matching ErrOutcomeNotStored
// instead of running the method again. The error matches err and
// ErrOutcomeNotStored. NotStorable(nil) is nil.
func NotStorable(err error) error {
	if err == nil {
		return nil
	}
	return &notStorableError{err: err}
}

type notStorableError struct{ err error }

func (e *notStorableError) Error() string   { return e.err.Error() }
func (e *notStorableError) Unwrap() []error { return []error{e.err, ErrOutcomeNotStored} }
