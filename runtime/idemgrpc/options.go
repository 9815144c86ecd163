package idemgrpc

import (
	"context"
	"fmt"
	"log/slog"
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
	// DefaultExpectedRun is how long a keyed call is expected to run when
	// WithExpectedRun does not say: the retry delay of an Aborted.
	DefaultExpectedRun = time.Second
	// DefaultHandlerTimeout bounds a keyed handler's run (WithHandlerTimeout).
	DefaultHandlerTimeout = time.Minute
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

// Option configures the server interceptor. An invalid option (a duration
// or size that is not positive, a nil function) makes
// UnaryServerInterceptor panic with a message that names it.
type Option func(*config)

type config struct {
	selector    func(fullMethod string) bool
	optional    bool
	ttl         time.Duration
	lease       time.Duration
	wait        time.Duration
	maxRetry    time.Duration
	expected    time.Duration
	tenant      func(context.Context) string // nil with single: one shared tenant
	single      bool                         // SingleTenant
	fingerprint func(ctx context.Context, fullMethod string, req any, h *idem.Hasher) error
	policy      Policy
	maxResponse int
	cancel      bool
	handlerMax  time.Duration
	log         *slog.Logger
	observe     func(Event)
	bad         string // the first invalid option, for the panic
}

// invalid records the first invalid option.
func (c *config) invalid(format string, args ...any) {
	if c.bad == "" {
		c.bad = "idemgrpc: " + fmt.Sprintf(format, args...)
	}
}

// validate checks what single options cannot: how they combine, and that
// the tenancy was chosen.
func (c *config) validate() {
	if c.lease > c.ttl {
		c.invalid("WithLease(%v) exceeds the TTL, %v (WithTTL): a claim cannot outlive its record", c.lease, c.ttl)
	}
	switch {
	case c.tenant != nil && c.single:
		c.invalid("WithTenant and SingleTenant both given: choose one tenancy")
	case c.tenant == nil && !c.single:
		c.invalid("UnaryServerInterceptor: no tenancy chosen: pass WithTenant(f) to scope keys by client " +
			"(f names the authenticated caller from ctx), or SingleTenant() if every client " +
			"may be answered with another client's stored outcome when it sends that client's key")
	}
}

func defaultConfig() config {
	return config{
		selector:    func(string) bool { return true },
		ttl:         DefaultTTL,
		fingerprint: DefaultFingerprint,
		policy:      DefaultPolicy,
		maxResponse: DefaultMaxResponse,
		handlerMax:  DefaultHandlerTimeout,
		expected:    DefaultExpectedRun,
		log:         slog.Default(),
		observe:     func(Event) {},
	}
}

// WithMethods sets which unary methods need a key: those for which f,
// given the full method name ("/pkg.Service/Method"), returns true. The
// default is every unary method. Calls of other methods pass through
// untouched, as streaming calls always do.
func WithMethods(f func(fullMethod string) bool) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithMethods(nil)")
			return
		}
		c.selector = f
	}
}

// WithOptionalKey lets calls without an idempotency-key through to the
// handler, unprotected, instead of answering InvalidArgument. A key that is
// present but malformed is still refused.
func WithOptionalKey() Option { return func(c *config) { c.optional = true } }

// WithTTL sets how long a stored outcome is replayed (default 24h). It must
// cover the clients' retry budget, and be positive.
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
// another call may take the key over (default: the executor's lease). Set
// it above the handler's longest run.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithLease(%v): the lease must be > 0", d)
			return
		}
		c.lease = d
	}
}

// WithWait makes a call that finds the same key in flight wait up to d for
// the first to finish and get its stored outcome, instead of Aborted.
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithWait(%v): the wait must be >= 0", d)
			return
		}
		c.wait = d
	}
}

// WithMaxRetryAfter caps the retry delay of the RetryInfo detail sent with
// Aborted (see WithExpectedRun).
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithMaxRetryAfter(%v): the cap must be > 0", d)
			return
		}
		c.maxRetry = d
	}
}

// WithTenant sets the function that names the tenant of a call (the
// authenticated subject, read from ctx as set by an authentication
// interceptor placed before this one). Keys are scoped by tenant and full
// method name, so a client that sends another client's key never gets its
// outcome. A call whose tenant is "" is refused with Unauthenticated and
// nothing runs: an empty tenant would share one key space among every
// such call. UnaryServerInterceptor requires either WithTenant or
// SingleTenant. The executor's own tenant function applies too.
//
// The tenant reaches the handler: its context carries it
// (idem.ContextWithTenant), so a generated wrapper or idem.Do the handler
// calls scopes its records by it, on a SingleTenant executor too, and an
// executor whose WithTenant function names another tenant fails with
// idem.ErrTenantConflict instead of answering one client with another's
// outcome.
func WithTenant(f func(ctx context.Context) string) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithTenant(nil)")
			return
		}
		c.tenant = f
	}
}

// SingleTenant makes every client share one key space per method: a
// client that sends a key another client used with the same request gets
// that client's stored outcome. That is right only when the clients trust
// each other (one internal caller); otherwise use WithTenant.
// UnaryServerInterceptor requires one of the two, so that the choice is
// written where the server is built.
func SingleTenant() Option { return func(c *config) { c.single = true } }

// WithFingerprint sets what makes two calls with the same key "the same
// call": f adds the call's significant parts to h. The default,
// DefaultFingerprint, takes the full method name and the request message's
// deterministic wire bytes. A call whose fingerprint differs from the first
// one's gets FailedPrecondition. An error from f is answered with
// InvalidArgument.
func WithFingerprint(f func(ctx context.Context, fullMethod string, req any, h *idem.Hasher) error) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithFingerprint(nil)")
			return
		}
		c.fingerprint = f
	}
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
func WithPolicy(p Policy) Option {
	return func(c *config) {
		if p == nil {
			c.invalid("WithPolicy(nil)")
			return
		}
		c.policy = p
	}
}

// WithMaxResponse sets the largest response stored, in wire bytes (default
// 4 MiB). A larger response still reaches the client, but the key is
// released: a retry runs the handler again.
func WithMaxResponse(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithMaxResponse(%d): the limit must be at least 1 byte", n)
			return
		}
		c.maxResponse = n
	}
}

// WithClientCancellation makes the handler's context end when the client
// cancels, as it does without the interceptor. By default the handler of a
// keyed call runs with context.WithoutCancel and the client's deadline
// re-applied: a client that cancels (or disconnects) does not stop it, so
// it runs to completion and its outcome is stored for the retry, which is
// the lost-response case the interceptor exists for; the deadline the
// client sent still bounds it, and reaches its downstream calls. With this
// option a handler that returns a context error releases the key (Canceled
// and DeadlineExceeded are not stored by DefaultPolicy).
func WithClientCancellation() Option { return func(c *config) { c.cancel = true } }

// WithHandlerTimeout bounds how long a keyed handler runs (default
// DefaultHandlerTimeout, one minute): its context ends then, or at the
// client's deadline when that comes first, so that a downstream call that
// never answers cannot hold the handler, its goroutine and its key forever.
// A handler that returns a context error answers DeadlineExceeded, which
// DefaultPolicy does not store: the key is released and a retry runs the
// handler again. Set it above the handler's longest run; it must be
// positive. While the handler runs, the interceptor renews its lease where
// the executor's store can (idem.Executor.CanRenew), so a handler that runs
// past WithLease keeps its key.
func WithHandlerTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithHandlerTimeout(%v): the timeout must be > 0", d)
			return
		}
		c.handlerMax = d
	}
}

// WithLogger sets where the interceptor logs the store errors its clients
// are answered without (default slog.Default()): a status names the rule,
// never the store's address, user or database; the log line (WARN, the
// method, tenant, key and the store's error) has them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.invalid("WithLogger(nil)")
			return
		}
		c.log = l
	}
}

// WithExpectedRun sets how long the method's calls are expected to run
// (default DefaultExpectedRun, one second); it must be positive. A call
// that finds its key in flight is answered Aborted with a RetryInfo whose
// delay is the smaller of d and the time left on the running call's lease,
// capped by WithMaxRetryAfter: the lease left says when the key could be
// taken over, not when the outcome will be there (a lease of 30 s over a
// call that ends in 2 s), so a client told the lease would wait far longer
// than it needs. Set d near the method's typical run.
func WithExpectedRun(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("WithExpectedRun(%v): the expected run must be > 0", d)
			return
		}
		c.expected = d
	}
}
