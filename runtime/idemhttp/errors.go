package idemhttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// problemSpec is one rule's answer: a problem details object and, when
// set, a Retry-After.
type problemSpec struct {
	kind          EventKind
	status        int
	rule, title   string
	detail        string
	retryAfter    time.Duration
	hasRetryAfter bool
}

// storeUnavailable answers a store that could not be reached.
var storeUnavailable = problemSpec{kind: EventStoreError, status: http.StatusServiceUnavailable,
	rule: "store-unavailable", title: "Idempotency store unavailable",
	detail:     "The idempotency of this request could not be checked, so it was not processed; retry with the same Idempotency-Key.",
	retryAfter: time.Second, hasRetryAfter: true}

// tenantConflict answers a request for which two layers name two
// different tenants (idem.ErrTenantConflict).
var tenantConflict = problemSpec{kind: EventTenantMissing, status: http.StatusForbidden,
	rule: "tenant-conflict", title: "Request names two tenants",
	detail: "Two layers of this service name different tenants (clients) for this request, so it is not known whose records it may see; nothing was processed. Send the request with one identity."}

// layer is the idempotency layer whose key decided an answer: the
// middleware's own claim (the Idempotency-Key) or a wrapped method the
// handler called (its business key, such as an order's ID).
type layer uint8

const (
	byIdempotencyKey layer = iota
	byBusinessKey
)

// problemOf maps an error of idem.Do to its answer, naming the layer that
// decided: by the middleware's own claim (byIdempotencyKey) or a wrapped
// method the handler called (byBusinessKey, WriteError). ok is false for an
// error it has no rule for (a store error, a business error). maxRetry
// caps the Retry-After of a call in progress (WithMaxRetryAfter; 0: none).
func problemOf(err error, maxRetry time.Duration, by layer) (problemSpec, bool) {
	p, ok := problemOfKey(err, maxRetry)
	if !ok || by != byBusinessKey {
		return p, ok
	}
	// The same conditions, decided by a key the client did not send: a new
	// Idempotency-Key does not change them, and the answer must not say
	// that the client's key is the matter.
	switch p.rule {
	case "key-reused":
		p.rule, p.title = "business-key-reused", "Business key reused with a different request"
		p.detail = "An operation this request performs is idempotent by a key of its own (a business key, such as an order's ID), and that key was already used with a different request" +
			opOf(err) + "; nothing was processed. The Idempotency-Key is not the matter: a new one gets the same answer. Send the earlier request's values, or look its outcome up."
	case "request-in-progress":
		p.rule, p.title = "business-key-in-progress", "Another request for the same business key is in progress"
		p.detail = "An operation this request performs is idempotent by a key of its own (a business key, such as an order's ID), and another request holding that key" +
			opOf(err) + " has not finished; nothing was processed. Retry after the time in Retry-After (the other request's lease), with the same Idempotency-Key, to get its outcome."
	}
	return p, true
}

// opOf names the operation of a wrapped method's refusal, when the error
// carries it: " (operation X)".
func opOf(err error) string {
	var inProgress *idem.InProgressError
	if errors.As(err, &inProgress) && inProgress.Key.Op != "" {
		return " (operation " + strconv.QuoteToASCII(truncate(inProgress.Key.Op, 64)) + ")"
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// problemOfKey is problemOf by the Idempotency-Key.
func problemOfKey(err error, maxRetry time.Duration) (p problemSpec, ok bool) {
	var inProgress *idem.InProgressError
	var quota *idem.TenantQuotaError
	var pending *idem.OutcomePendingError
	switch {
	case errors.Is(err, idem.ErrMissingTenant):
		// The executor's tenant function named none, and nothing above it
		// did (idem.WithTenant returning ""): an empty tenant is no key
		// space.
		return problemSpec{kind: EventTenantMissing, status: http.StatusForbidden,
			rule: "missing-tenant", title: "Request has no tenant",
			detail: "This operation scopes its idempotency keys by client, and this request names none (it is not authenticated); nothing was processed. Authenticate, and retry with the same Idempotency-Key."}, true
	case errors.Is(err, idem.ErrTenantConflict):
		return tenantConflict, true
	case errors.As(err, &quota):
		// The store has room, but not for this tenant: the others go on,
		// so this is the tenant's rate of new keys, not an outage.
		return problemSpec{kind: EventTenantOverQuota, status: http.StatusTooManyRequests,
			rule: "tenant-over-quota", title: "Tenant over its share of the idempotency store",
			detail:     "This tenant holds its whole share of the idempotency store (" + strconv.FormatInt(quota.Share, 10) + " records) and a new key was refused, so the request was not processed; other tenants are served. Retry with the same Idempotency-Key after the time in Retry-After, once earlier keys expire.",
			retryAfter: storeFullRetryAfter, hasRetryAfter: true}, true
	case errors.Is(err, idem.ErrStoreBusy): // before ErrStoreFull, which it matches too
		return problemSpec{kind: EventStoreBusy, status: http.StatusServiceUnavailable,
			rule: "store-busy", title: "Idempotency store busy",
			detail:     "The idempotency store's connections were all in use by running requests and none freed up in time, so the request was not processed; retry with the same Idempotency-Key after the time in Retry-After.",
			retryAfter: time.Second, hasRetryAfter: true}, true
	case errors.As(err, &pending):
		// The request ran; its outcome is being stored while the claim is
		// live (lease mode, a store outage): a retry gets it, never a
		// second run.
		d := pending.RetryAfter
		if maxRetry > 0 {
			d = min(d, maxRetry)
		}
		return problemSpec{kind: EventInProgress, status: http.StatusConflict,
			rule: "request-in-progress", title: "A request with this Idempotency-Key is in progress",
			detail:     "The request with this Idempotency-Key ran, and its outcome is not stored yet (the idempotency store could not be reached); retry after the time in Retry-After to get its response. It will not run again while its claim is live.",
			retryAfter: max(d, time.Second), hasRetryAfter: true}, true
	case errors.Is(err, idem.ErrStoreFull):
		return problemSpec{kind: EventStoreFull, status: http.StatusServiceUnavailable,
			rule: "store-full", title: "Idempotency store full",
			detail:     "The idempotency store is at its capacity (its records are all in use) and refused a new key, so the request was not processed; retry with the same Idempotency-Key after the time in Retry-After.",
			retryAfter: storeFullRetryAfter, hasRetryAfter: true}, true
	case errors.Is(err, idem.ErrTooLarge):
		// The operation and the middleware's tenant were checked before:
		// this is the executor's tenant (idem.WithTenant).
		return problemSpec{kind: EventScopeTooLong, status: http.StatusBadRequest,
			rule: "scope-too-long", title: "Request scope too long to record",
			detail: "The request's tenant or operation is longer than the idempotency store records; nothing was processed."}, true
	case errors.Is(err, idem.ErrOutcomeNotStored), errors.Is(err, idem.ErrUndecodable):
		// The first request ran; what it answered is not available to
		// replay, and it will not run again for this key. A 503 would
		// invite retries that can never succeed.
		why := "its response could not be stored (too large, or its outcome unknown: it was answered with " + NotStoredHeader + ")"
		if errors.Is(err, idem.ErrUndecodable) {
			why = "its stored response no longer decodes (the service was changed since)"
		}
		return problemSpec{kind: EventNotReplayable, status: http.StatusInternalServerError,
			rule: "response-not-replayable", title: "Response of this Idempotency-Key cannot be replayed",
			detail: "The first request with this Idempotency-Key was processed (or may have been, when its outcome is unknown), but " + why + ". Retrying with this key will not process it again; look its result up instead, and send a new key only for a new request."}, true
	case errors.Is(err, idem.ErrMisconfigured):
		return problemSpec{kind: EventStoreError, status: http.StatusInternalServerError,
			rule: "server-misconfigured", title: "Idempotency misconfigured",
			detail: "The service's idempotency settings are invalid, so no request with an Idempotency-Key can be processed; nothing was processed. Retrying will not help until the service is fixed."}, true
	case errors.Is(err, idem.ErrPayloadMismatch):
		return problemSpec{kind: EventConflict, status: http.StatusUnprocessableEntity,
			rule: "key-reused", title: "Idempotency-Key reused with a different request",
			detail: "This Idempotency-Key was already used with a different request (method, path, query or body); a key identifies one request and must not be reused for another."}, true
	case errors.As(err, &inProgress):
		d := inProgress.RetryAfter
		if maxRetry > 0 {
			d = min(d, maxRetry)
		}
		return problemSpec{kind: EventInProgress, status: http.StatusConflict,
			rule: "request-in-progress", title: "A request with this Idempotency-Key is in progress",
			detail:     "The first request with this Idempotency-Key has not finished; retry after the time in Retry-After to get its response.",
			retryAfter: d, hasRetryAfter: true}, true
	case errors.Is(err, idem.ErrLeaseLost):
		// A wrapped method ran longer than its lease, and another caller
		// took its key over: that caller's outcome is the one stored.
		return problemSpec{kind: EventInProgress, status: http.StatusConflict,
			rule: "request-in-progress", title: "A request with this Idempotency-Key is in progress",
			detail:     "Another attempt of this request took it over and has not finished; retry after the time in Retry-After to get its response.",
			retryAfter: time.Second, hasRetryAfter: true}, true
	case errors.Is(err, idem.ErrStoreUnavailable):
		// The store could not be used before the handler ran (down, or its
		// schema missing: idem.ErrStoreSchema): nothing was processed.
		return storeUnavailable, true
	case errors.Is(err, idem.ErrMissingKey):
		return problemSpec{kind: EventInvalidRequest, status: http.StatusBadRequest,
			rule: "missing-key-part", title: "Request lacks a part of its idempotency key",
			detail: err.Error() + ": the operation is idempotent by this value, and the request does not carry it; nothing was processed."}, true
	}
	return problemSpec{}, false
}

// write answers with p.
func (m *middleware) write(w http.ResponseWriter, p problemSpec) {
	writeProblem(w, m.cfg.problemBase, p)
}

func writeProblem(w http.ResponseWriter, base string, p problemSpec) {
	if p.hasRetryAfter {
		w.Header().Set("Retry-After", retryAfter(p.retryAfter))
	}
	problem(w, base, p.status, p.rule, p.title, p.detail)
}

// WriteError writes, for an error a generated wrapper (or idem.Do)
// returned to a handler, the problem details of its rule, in the format of
// the middleware's own refusals (status, type, Retry-After,
// application/problem+json). The answer names the layer that decided: the
// wrapper's key (a business key such as an order's ID), never the
// client's Idempotency-Key, which a new key would not change. It reports
// whether err was one of them: idem.ErrInProgress, an
// *idem.OutcomePendingError and idem.ErrLeaseLost (409,
// "business-key-in-progress", Retry-After the holder's lease left, from
// the error's RetryAfter), idem.ErrPayloadMismatch (422,
// "business-key-reused"), idem.ErrMissingTenant (403, "missing-tenant"),
// idem.ErrTenantConflict (403, "tenant-conflict"), idem.ErrMissingKey
// (400, "missing-key-part"), idem.ErrStoreFull (503, Retry-After),
// idem.ErrTooLarge (400), idem.ErrOutcomeNotStored and idem.ErrUndecodable
// (500), idem.ErrMisconfigured (500). For any other error (the method's
// own, a store that could not be reached) it writes nothing and returns
// false: the handler maps it. The framework adapters (idemgin, idemecho,
// idemfiber) call it for the errors their handlers return.
//
// The options that shape answers apply: WithProblemBase (the type's
// prefix) and WithMaxRetryAfter; the others are ignored.
func WriteError(w http.ResponseWriter, err error, opts ...Option) bool {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	p, ok := problemOf(err, cfg.maxRetry, byBusinessKey)
	if !ok {
		return false
	}
	writeProblem(w, cfg.problemBase, p)
	return true
}
