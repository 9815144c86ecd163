package idemgrpc

import (
	"strconv"

	"google.golang.org/grpc/codes"
)

// EventKind says what the server interceptor did with a call.
type EventKind uint8

const (
	// EventKeyMissing: a call had no idempotency-key; Code is
	// InvalidArgument, or OK when WithOptionalKey let it through unprotected.
	EventKeyMissing EventKind = iota + 1
	// EventKeyInvalid: the key was malformed or repeated (InvalidArgument).
	EventKeyInvalid
	// EventResponseTooLarge: the response exceeded WithMaxResponse (or was
	// not a proto.Message: Err says which); it was sent but not stored, and
	// the key was released.
	EventResponseTooLarge
	// EventNotStored: the policy declined the handler's Code; the key was
	// released.
	EventNotStored
	// EventReplayed: a stored outcome was replayed (Code is its code).
	EventReplayed
	// EventConflict: the key was reused with another request
	// (FailedPrecondition).
	EventConflict
	// EventInProgress: the key was in flight (Aborted).
	EventInProgress
	// EventStoreError: the store failed; Err says how (Unavailable when the
	// handler's outcome was not delivered).
	EventStoreError
	// EventTenantMissing: the WithTenant function named no tenant for the
	// call (Unauthenticated); nothing was processed.
	EventTenantMissing
)

var kindNames = [...]string{"", "key_missing", "key_invalid", "response_too_large", "not_stored",
	"replayed", "conflict", "in_progress", "store_error", "tenant_missing"}

// String returns the event's name in snake case.
func (k EventKind) String() string {
	if k != 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is what the interceptor's observer is told.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// FullMethod is the method called.
	FullMethod string
	// Tenant scopes the key (empty before it is known).
	Tenant string
	// Key is the idempotency-key as sent (empty when missing or invalid).
	Key string
	// Code is the status code concerned (see each kind).
	Code codes.Code
	// Err is the error behind the event, if any.
	Err error
}

// WithObserver sets a function told of the interceptor's own events (the
// executor's observer sees claims, replays and releases). It is called
// synchronously and must be safe for concurrent use.
func WithObserver(f func(Event)) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithObserver(nil)")
			return
		}
		c.observe = f
	}
}
