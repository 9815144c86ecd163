package idemgrpc

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// refusal of the server interceptor carries (a status it answers itself,
// without the handler's outcome), so that a caller tells "the idempotency
// layer refused" from the service's own answer of the same code. Refusal
// reads it.
const ErrorDomain = "idemgrpc.idemgen.dev"

// The reasons of the ErrorInfo detail (ErrorDomain) on the interceptor's
// refusals, one per rule.
const (
	ReasonKeyMissing         = "IDEMPOTENCY_KEY_MISSING"     // InvalidArgument
	ReasonKeyInvalid         = "IDEMPOTENCY_KEY_INVALID"     // InvalidArgument
	ReasonRequestInvalid     = "REQUEST_NOT_FINGERPRINTABLE" // InvalidArgument
	ReasonTenantMissing      = "TENANT_MISSING"              // Unauthenticated
	ReasonTenantConflict     = "TENANT_CONFLICT"             // PermissionDenied
	ReasonKeyReused          = "IDEMPOTENCY_KEY_REUSED"      // FailedPrecondition
	ReasonInProgress         = "IN_PROGRESS"                 // Aborted, with RetryInfo
	ReasonStoreUnavailable   = "STORE_UNAVAILABLE"           // Unavailable
	ReasonStoreBusy          = "STORE_BUSY"                  // Unavailable
	ReasonStoreFull          = "STORE_FULL"                  // ResourceExhausted
	ReasonScopeTooLarge      = "SCOPE_TOO_LARGE"             // InvalidArgument
	ReasonOutcomeNotStored   = "OUTCOME_NOT_STORED"          // Internal
	ReasonOutcomeUndecodable = "OUTCOME_UNDECODABLE"         // Internal or Unavailable
	ReasonMisconfigured      = "MISCONFIGURED"               // Internal
	ReasonNotCommitted       = "OUTCOME_NOT_COMMITTED"       // Unavailable: a transactional store could not commit
)

// ErrDownstreamRefused is the reason the server interceptor gives the
// executor for releasing a key when the handler answered with a refusal of
// a downstream idemgrpc service (a status with an ErrorInfo of
// ErrorDomain): that refusal is not this call's outcome, so it is never
// stored, whatever the policy says, and the retry runs the handler again.
var ErrDownstreamRefused = errors.New("idemgrpc: the handler answered with a downstream idempotency refusal")

// Refusal reports whether err is (or wraps) a status that an idemgrpc
// server interceptor answered itself, and its reason (one of the Reason
// constants).
func Refusal(err error) (reason string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st == nil {
		return "", false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == ErrorDomain {
			return info.GetReason(), true
		}
	}
	return "", false
}

// refusalStatus returns the status of a refusal: code, msg and an ErrorInfo
// detail naming reason.
func refusalStatus(code codes.Code, reason, msg string) *status.Status {
	st := status.New(code, msg)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		return withInfo
	}
	return st
}
