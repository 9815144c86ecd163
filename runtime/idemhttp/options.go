package idemhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Defaults of the middleware's options.
const (
	// DefaultTTL is how long a stored response is replayed (Stripe keeps
	// keys for 24 hours).
	DefaultTTL = 24 * time.Hour
	// DefaultMaxResponse is the largest response body stored: 1 MiB.
	DefaultMaxResponse = 1 << 20
	// DefaultMaxBody is the largest request body accepted on a keyed
	// request: 1 MiB. A larger one is answered with 413.
	DefaultMaxBody = 1 << 20
	// MaxMaxResponse is the largest limit WithMaxResponse accepts: 32 MiB,
	// so that a stored response (its body base64-encoded by the default
	// codec, and its header fields) stays within idem.MaxOutcomeLen.
	MaxMaxResponse = 32 << 20
)

// DefaultStoredHeaders returns the allow-list of response header fields
// stored and replayed, unless WithStoredHeaders replaces it (a new slice on
// each call: there is no package-level state to change). Content-Length is
// not in it: it is computed from the stored body on replay.
func DefaultStoredHeaders() []string {
	return []string{
		"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Location", "Content-Type", "ETag", "Expires", "Last-Modified", "Link",
		"Location", "Retry-After", "Vary",
	}
}

// neverStored are header fields that are never stored, whatever the
// allow-list says: credentials and session state of one response must not
// be handed to whoever replays the key.
var neverStored = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true, "Proxy-Authorization": true,
	"Cookie": true, "Www-Authenticate": true, "Proxy-Authenticate": true,
	"Authentication-Info": true, "Proxy-Authentication-Info": true,
	ReplayedHeader: true, ReplayedByHeader: true, DerivedKeyHeader: true, "Content-Length": true, "Transfer-Encoding": true,
	"Connection": true, "Trailer": true,
}

// Policy decides from the handler's status whether a response is stored
// and replayed (true) or the key is released so that a retry runs the
// handler again (false). A panic always releases the key, whatever the
// policy: there is no response to replay.
type Policy func(status int) bool

// DefaultPolicy stores 2xx, 3xx and 4xx responses, except 408 Request
// Timeout, 409 Conflict, 425 Too Early and 429 Too Many Requests, which say
// "try again"; 5xx responses release the key.
func DefaultPolicy(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// StoreAll stores every response once the handler started, 5xx included,
// as Stripe does: a retry never runs the handler twice, and a failure is
// replayed like a success. Use it when a handler that fails may still have
// had effects that must not happen twice.
func StoreAll(status int) bool { return status >= 200 }

// Option configures the middleware. An invalid option (a duration or size
// that is not positive, a nil function) makes New panic with a message that
// names it.
type Option func(*config)

type config struct {
	methods     map[string]bool
	optional    bool
	ttl         time.Duration
	lease       time.Duration
	wait        time.Duration
	tenant      func(*http.Request) string // nil with single: one shared tenant
	single      bool                       // SingleTenant
	op          func(*http.Request) string
	fingerprint func(r *http.Request, body []byte, h *idem.Hasher) error
	policy      Policy
	stored      map[string]bool
	maxResponse int
	maxBody     int64
	observe     func(Event)
	cancel      bool
	problemBase string
	maxRetry    time.Duration
	customFP    bool          // fingerprint is not DefaultFingerprint: it may fail in Sum
	window      time.Duration // WithDerivedKey: > 0 derives a key for a request without one
	bad         string        // the first invalid option, for New's panic
}

// invalid records the first invalid option.
func (c *config) invalid(format string, args ...any) {
	if c.bad == "" {
		c.bad = "idemhttp: " + fmt.Sprintf(format, args...)
	}
}

// validate checks what single options cannot: how they combine, and that
// the tenancy was chosen.
func (c *config) validate() {
	if c.lease > c.ttl {
		c.invalid("WithLease(%v) exceeds the TTL, %v (WithTTL): a claim cannot outlive its record", c.lease, c.ttl)
	}
	if c.window > 0 && c.optional {
		c.invalid("WithDerivedKey and WithOptionalKey both given: a request without a key either gets a derived key or runs unprotected; choose one")
	}
	switch {
	case c.tenant != nil && c.single:
		c.invalid("WithTenant and SingleTenant both given: choose one tenancy")
	case c.tenant == nil && !c.single:
		c.invalid("New: no tenancy chosen: pass WithTenant(f) to scope keys by client " +
			"(f names the authenticated caller of a request), or SingleTenant() if every client " +
			"may be answered with another client's stored response when it sends that client's key")
	}
}

func defaultConfig() config {
	c := config{
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		ttl:         DefaultTTL,
		fingerprint: DefaultFingerprint,
		policy:      DefaultPolicy,
		maxResponse: DefaultMaxResponse,
		maxBody:     DefaultMaxBody,
		observe:     func(Event) {},
		problemBase: DefaultProblemBase,
	}
	WithStoredHeaders(DefaultStoredHeaders()...)(&c)
	return c
}

// WithMethods sets the request methods the middleware applies to (default
// POST and PATCH); requests with other methods pass through untouched. At
// least one method is required, each a valid method token (case matters:
// "post" is not POST).
func WithMethods(methods ...string) Option {
	return func(c *config) {
		if len(methods) == 0 {
			c.invalid("WithMethods(): no methods: the middleware would protect nothing")
			return
		}
		set := make(map[string]bool, len(methods))
		for _, m := range methods {
			if !isToken(m) {
				c.invalid("WithMethods(%q): not a method token", m)
				return
			}
			set[m] = true
		}
		c.methods = set
	}
}

// isToken reports whether s is a token of RFC 9110 section 5.6.2 (the syntax
// of a method and of a field name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// WithOptionalKey lets requests without an Idempotency-Key through to the
// handler, unprotected, instead of answering 400; the observer is told
// (EventKeyMissing) so that such clients can be found. A key that is
// present but invalid is still answered with 400. Under WithTenant the
// handler's context names the request's tenant all the same, as for the
// methods the middleware does not apply to ("" when the tenant function
// names none: the wrapped methods the handler calls then refuse with
// idem.ErrMissingTenant).
func WithOptionalKey() Option { return func(c *config) { c.optional = true } }

// WithTTL sets how long a stored response is replayed (default 24h); it
// must be positive, and cover the clients' retry budget.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithTTL(%v): the TTL must be > 0", d)
			return
		}
		c.ttl = d
	}
}

// WithLease sets how long a claim holds while the handler runs before
// another request may take the key over (default: the executor's lease,
// 30s unless configured, capped at the TTL). It must be positive and at
// most the TTL. Set it above the handler's longest run.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithLease(%v): the lease must be > 0", d)
			return
		}
		c.lease = d
	}
}

// WithMaxRetryAfter caps the Retry-After of a 409. By default it is the time
// until the first request's lease lapses (rounded up to whole seconds, at
// least 1): the latest moment the first request can still hold the key,
// which is as long as the lease whatever the handler's usual run time. A
// cap invites earlier retries, which may get another 409. It must be
// positive (Retry-After is at least 1 second whatever the cap).
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithMaxRetryAfter(%v): the cap must be > 0", d)
			return
		}
		c.maxRetry = d
	}
}

// WithWait makes a request that finds the same key in flight wait up to d
// for the first to finish and get its stored response, instead of a 409.
// If the first releases the key (a 5xx, a panic), the waiting request runs
// the handler itself. After d it gets the 409. WithWait(0) is the default:
// no waiting; a negative d is invalid.
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithWait(%v): the wait must be >= 0", d)
			return
		}
		c.wait = d
	}
}

// WithTenant sets the function that names the tenant of a request: the
// authenticated subject, the API key's account. Keys are scoped by tenant,
// so two tenants that send the same key get two executions, and a client
// that guesses another tenant's key never sees its response. New requires
// either WithTenant or SingleTenant.
//
// The function must not depend on anything a retry may change (a request
// ID, a timestamp), and must not read the body (the middleware has read
// it). A request whose tenant is "" (not authenticated, or an
// authentication middleware placed after this one) is refused with 403
// (missing-tenant) and nothing runs: an empty tenant would share one key
// space among every such request. The executor's own tenant function
// (idem.WithTenant) applies too, to the request's context. A tenant
// longer than idem.MaxTenantLen bytes is answered with 400
// (scope-too-long).
func WithTenant(f func(*http.Request) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithTenant(nil)")
			return
		}
		c.tenant = f
	}
}

// SingleTenant makes every client share one key space per operation: a
// client that sends a key another client used (by accident, or by guessing
// it) with the same request gets that client's stored response, or a 422
// if its request differs. That is right only when there is one client, or
// the clients trust each other (a service behind one internal caller);
// otherwise use WithTenant. New requires one of the two, so that the
// choice is written where the middleware is built.
func SingleTenant() Option { return func(c *config) { c.single = true } }

// WithOperation sets the function that names the operation of a request,
// which scopes keys together with the tenant. The default is the method
// and the route: r.Pattern when the handler is registered on a Go 1.22+
// http.ServeMux (wrap each route, or wrap the mux itself: the middleware
// then asks the mux for the pattern), else the URL path in its canonical
// escaped form ("POST /orders/%FF": printable ASCII whatever bytes the path
// decodes to, the same for every spelling of the same path). An operation
// longer than idem.MaxOpLen bytes is answered with 414 when it is the
// path, 400 otherwise (scope-too-long).
func WithOperation(f func(*http.Request) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithOperation(nil)")
			return
		}
		c.op = f
	}
}

// WithFingerprint sets what makes two requests with the same key "the same
// request": f adds the request's significant parts to h. The default,
// DefaultFingerprint, takes the method, path, query and body. A request
// whose fingerprint differs from the first one's with that key gets 422.
// body is the request body, already read (do not read r.Body). An error
// from f, or a value h cannot encode (h.Sum fails), is answered with 400.
func WithFingerprint(f func(r *http.Request, body []byte, h *idem.Hasher) error) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithFingerprint(nil)")
			return
		}
		c.fingerprint, c.customFP = f, true
	}
}

// DefaultFingerprint adds the method, the path, the raw query and the body:
// a different byte anywhere in them is a different request. (A client that
// reorders query parameters or re-encodes JSON on retry needs a custom
// fingerprint that canonicalizes them.)
func DefaultFingerprint(r *http.Request, body []byte, h *idem.Hasher) error {
	h.String(r.Method)
	h.String(r.URL.Path)
	h.String(r.URL.RawQuery)
	h.Bytes(body)
	return nil
}

// WithPolicy sets which responses are stored (default DefaultPolicy; StoreAll
// is the Stripe-like alternative).
func WithPolicy(p Policy) Option {
	return func(c *config) {
		if p == nil {
			c.invalid("WithPolicy(nil)")
			return
		}
		c.policy = p
	}
}

// WithStoredHeaders replaces the allow-list of response header fields that
// are stored and replayed (default DefaultStoredHeaders). Set-Cookie,
// Authorization and the other credential fields are never stored, even when
// listed here; neither are hop-by-hop fields and Content-Length.
// Content-Encoding is always stored when the response has it, listed or
// not: the stored body cannot be read without it. Each name must be a valid
// field name; an empty list stores no header field but Content-Encoding.
func WithStoredHeaders(names ...string) Option {
	return func(c *config) {
		stored := make(map[string]bool, len(names)+1)
		for _, n := range names {
			if !isToken(n) {
				c.invalid("WithStoredHeaders(%q): not a header field name", n)
				return
			}
			n = http.CanonicalHeaderKey(n)
			if !neverStored[n] {
				stored[n] = true
			}
		}
		stored["Content-Encoding"] = true
		c.stored = stored
	}
}

// WithMaxResponse sets the largest response body that is stored (default
// 1 MiB). A larger response still reaches the client, but it is not
// stored: the key is released (a retry runs the handler again) and the
// observer is told (EventResponseTooLarge). n must be between 1 and
// MaxMaxResponse.
func WithMaxResponse(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxMaxResponse {
			c.invalid("WithMaxResponse(%d): the limit must be between 1 and %d bytes (MaxMaxResponse)", n, MaxMaxResponse)
			return
		}
		c.maxResponse = n
	}
}

// WithMaxBody sets the largest request body read on a keyed request
// (default 1 MiB); a larger body is answered with 413. The body is read
// whole before the handler runs (it is part of the fingerprint) and handed
// to the handler unchanged. n must be positive.
func WithMaxBody(n int64) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithMaxBody(%d): the limit must be at least 1 byte", n)
			return
		}
		c.maxBody = n
	}
}

// WithObserver sets a function told of the middleware's own events (the
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

// WithClientCancellation makes the handler's context end when the client
// goes away, as it does without the middleware.
//
// By default the handler of a keyed request runs with a context that is not
// cancelled when the client disconnects or times out (context.WithoutCancel:
// its values stay, its deadline and cancellation go): the request runs to
// completion and its response is stored for the retry, which is the
// lost-response case this middleware exists for. With this option a handler
// may stop early; a response it wrote is stored as usual, but if it returns
// without writing anything after its context ended, the key is released
// (rather than storing an empty 200 the client never asked for).
func WithClientCancellation() Option { return func(c *config) { c.cancel = true } }

// WithProblemBase sets the prefix of the "type" URI of the problem details
// the middleware answers with (default DefaultProblemBase); the rule's
// anchor is appended, e.g. "key-reused". base must be an absolute URI
// (RFC 9457 resolves a relative "type" against the response's URI, which
// would name a resource of the service).
func WithProblemBase(base string) Option {
	return func(c *config) {
		if u, err := url.Parse(base); err != nil || !u.IsAbs() {
			c.invalid("WithProblemBase(%q): not an absolute URI", base)
			return
		}
		c.problemBase = base
	}
}

// EventKind says what the middleware did with a request.
type EventKind uint8

const (
	// EventKeyMissing: a request had no Idempotency-Key; Status is 400, or
	// 0 when WithOptionalKey let it through unprotected.
	EventKeyMissing EventKind = iota + 1
	// EventKeyInvalid: the key was malformed, or the header was repeated (400).
	EventKeyInvalid
	// EventBodyTooLarge: the request body exceeded WithMaxBody (413).
	EventBodyTooLarge
	// EventResponseTooLarge: the response exceeded WithMaxResponse; it was
	// sent, with NotStoredHeader, but not stored, and the key is kept
	// decided: retries get 500 response-not-replayable, not a second run.
	EventResponseTooLarge
	// EventNotStored: the policy declined the handler's Status; the key was
	// released.
	EventNotStored
	// EventReplayed: a stored response was replayed (Status is its status).
	EventReplayed
	// EventConflict: the key was reused with another request (422).
	EventConflict
	// EventInProgress: the key was in flight (409).
	EventInProgress
	// EventStoreError: the store failed; Err says how (503 when the handler
	// did not run).
	EventStoreError
	// EventHijacked: the handler hijacked the connection; nothing was stored.
	EventHijacked
	// EventNotAcceptable: a stored response was not replayed because the
	// request would not have selected its representation (406).
	EventNotAcceptable
	// EventScopeTooLong: the operation or the tenant is longer than a
	// store records (414 or 400).
	EventScopeTooLong
	// EventStoreFull: the store refused a new key at its capacity (503,
	// store-full).
	EventStoreFull
	// EventInvalidRequest: the fingerprint function failed, or added a
	// value the hasher cannot encode (400).
	EventInvalidRequest
	// EventNotReplayable: the key's first request ran, but its response
	// could not be stored (idem.ErrOutcomeNotStored) or no longer decodes
	// (idem.ErrUndecodable): 500, and the handler does not run again.
	EventNotReplayable
	// EventClientGone: with WithClientCancellation, the client went away
	// before its request was claimed or while it waited (WithWait); nothing
	// was processed and nothing was answered (Status is 0).
	EventClientGone
	// EventTenantMissing: the WithTenant function named no tenant for the
	// request, or the executor's asked for one and none was named (403,
	// missing-tenant), or two layers named two tenants (403,
	// tenant-conflict; Err matches idem.ErrTenantConflict); nothing was
	// processed.
	EventTenantMissing
	// EventBodyUnreadable: the request body could not be read (the client
	// went away, or sent a malformed chunked body); 400, nothing was
	// processed.
	EventBodyUnreadable
	// EventTenantOverQuota: the store refused a new key because the tenant
	// holds its whole share of the store (an *idem.TenantQuotaError, 429);
	// other tenants are served. Count it by Tenant for a metric.
	EventTenantOverQuota
	// EventStoreBusy: the store's connections were all in use by running
	// requests and none freed up in time (idem.ErrStoreBusy); 503,
	// store-busy, nothing was processed. The store is not full.
	EventStoreBusy
	// EventOutcomeUnknown: the handler called OutcomeUnknown (the request
	// may have had its effects; its response does not say what they
	// were); the response was sent with NotStoredHeader and not stored,
	// and the key is kept decided: retries get 500 response-not-replayable.
	EventOutcomeUnknown
)

var kindNames = [...]string{"", "key_missing", "key_invalid", "body_too_large", "response_too_large",
	"not_stored", "replayed", "conflict", "in_progress", "store_error", "hijacked",
	"not_acceptable", "scope_too_long", "store_full", "invalid_request", "not_replayable", "client_gone", "tenant_missing",
	"body_unreadable", "tenant_over_quota", "store_busy", "outcome_unknown"}

// String returns the event's name in snake case.
func (k EventKind) String() string {
	if k != 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "event(" + itoa(int(k)) + ")"
}

// Event is what the middleware's observer is told.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Request is the request concerned, as the middleware received it.
	Request *http.Request
	// Op and Tenant scope the key (empty before they are known).
	Op, Tenant string
	// Key is the Idempotency-Key as sent (empty when missing or invalid).
	Key string
	// Derived: the request had no key, and its key was derived from the
	// request (WithDerivedKey); Key is empty.
	Derived bool
	// Status is the HTTP status concerned (see each kind).
	Status int
	// Err is the error behind the event, if any.
	Err error
}
