package idemgrpc

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Defaults of the server interceptor's options.
const (
	// DefaultTTL is how long a stored response is replayed (as idemhttp:
	// Stripe keeps keys for 24 hours).
	DefaultTTL = 24 * time.Hour
	// DefaultMaxResponse is the largest response stored, in wire bytes:
	// 4 MiB, grpc-go's default largest message.
	DefaultMaxResponse = 4 << 20
)

// Policy decides from the handler's status code whether its outcome is
// stored and replayed (true) or the key is released so that a retry runs
// the handler again (false). A panic always releases the key.
type Policy func(code codes.Code) bool

// DefaultPolicy stores what the HTTP door stores, code for code (see
// idemhttp.DefaultPolicy and the README's table): OK and the codes that
// say "this request is wrong or not allowed" (InvalidArgument, NotFound,
// AlreadyExists, PermissionDenied, Unauthenticated, FailedPrecondition,
// OutOfRange), the analogues of 2xx and 4xx. The codes that say "try
// again" or "the server failed" release the key: Canceled, Unknown,
// DeadlineExceeded, ResourceExhausted (429), Aborted (409), Unimplemented,
// Internal, Unavailable, DataLoss.
func DefaultPolicy(code codes.Code) bool {
	switch code {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

// StoreAll stores every outcome once the handler ran, as Stripe does (a
// 500 is replayed too): a retry never runs the handler twice. Use it when
// a handler that fails may still have had effects that must not happen
// twice.
func StoreAll(codes.Code) bool { return true }

// Option configures the server interceptor.
type Option func(*config)

type config struct {
	selector    func(fullMethod string) bool
	optional    bool
	ttl         time.Duration
	lease       time.Duration
	wait        time.Duration
	maxRetry    time.Duration
	tenant      func(context.Context) string
	fingerprint func(ctx context.Context, fullMethod string, req any, h *idem.Hasher) error
	policy      Policy
	maxResponse int
	cancel      bool
	observe     func(Event)
}

func defaultConfig() config {
	return config{
		selector:    func(string) bool { return true },
		ttl:         DefaultTTL,
		tenant:      func(context.Context) string { return "" },
		fingerprint: DefaultFingerprint,
		policy:      DefaultPolicy,
		maxResponse: DefaultMaxResponse,
		observe:     func(Event) {},
	}
}

// WithMethods sets which unary methods need a key: those for which f,
// given the full method name ("/pkg.Service/Method"), returns true. The
// default is every unary method. Calls of other methods pass through
// untouched, as streaming calls always do.
func WithMethods(f func(fullMethod string) bool) Option {
	return func(c *config) { c.selector = f }
}

// WithOptionalKey lets calls without an idempotency-key through to the
// handler, unprotected, instead of answering InvalidArgument. A key that is
// present but malformed is still refused.
func WithOptionalKey() Option { return func(c *config) { c.optional = true } }

// WithTTL sets how long a stored outcome is replayed (default 24h). It must
// cover the clients' retry budget.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithLease sets how long a claim holds while the handler runs before
// another call may take the key over (default: the executor's lease). Set
// it above the handler's longest run.
func WithLease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// WithWait makes a call that finds the same key in flight wait up to d for
// the first to finish and get its stored outcome, instead of Aborted.
func WithWait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithMaxRetryAfter caps the retry delay of the RetryInfo detail sent with
// Aborted (by default the time until the first call's lease lapses).
func WithMaxRetryAfter(d time.Duration) Option { return func(c *config) { c.maxRetry = d } }

// WithTenant sets the function that names the tenant of a call (the
// authenticated subject, read from ctx as set by an authentication
// interceptor placed before this one). Keys are scoped by tenant and full
// method name. Without it the service is single-tenant: every client
// shares one key space per method (see idemhttp.WithTenant for what that
// means). The executor's own tenant function applies too.
func WithTenant(f func(ctx context.Context) string) Option {
	return func(c *config) { c.tenant = f }
}

// WithFingerprint sets what makes two calls with the same key "the same
// call": f adds the call's significant parts to h. The default,
// DefaultFingerprint, takes the full method name and the request message's
// deterministic wire bytes. A call whose fingerprint differs from the first
// one's gets FailedPrecondition. An error from f is answered with
// InvalidArgument.
func WithFingerprint(f func(ctx context.Context, fullMethod string, req any, h *idem.Hasher) error) Option {
	return func(c *config) { c.fingerprint = f }
}

// DefaultFingerprint adds the full method name and the request, marshalled
// with deterministic protobuf encoding (map entries sorted), so that the
// same message always has the same fingerprint. The request must be a
// proto.Message.
func DefaultFingerprint(_ context.Context, fullMethod string, req any, h *idem.Hasher) error {
	m, ok := req.(proto.Message)
	if !ok {
		return errNotProto(req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	h.String(fullMethod)
	h.Bytes(b)
	return nil
}

// WithPolicy sets which outcomes are stored (default DefaultPolicy; StoreAll
// is the Stripe-like alternative).
func WithPolicy(p Policy) Option { return func(c *config) { c.policy = p } }

// WithMaxResponse sets the largest response stored, in wire bytes (default
// 4 MiB). A larger response still reaches the client, but the key is
// released: a retry runs the handler again.
func WithMaxResponse(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithClientCancellation makes the handler's context end when the client
// cancels or its deadline passes, as it does without the interceptor. By
// default the handler of a keyed call runs with context.WithoutCancel: it
// runs to completion and its outcome is stored for the retry, which is the
// lost-response case the interceptor exists for. With this option a handler
// that returns a context error releases the key (Canceled and
// DeadlineExceeded are not stored by DefaultPolicy).
func WithClientCancellation() Option { return func(c *config) { c.cancel = true } }
