package idemgrpc

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

type outgoingKeyCtx struct{}

// ContextWithOutgoingKey returns ctx carrying key as the idempotency key
// that the client interceptor sends, verbatim, on the calls made with ctx:
//
//	ctx = idemgrpc.ContextWithOutgoingKey(ctx, idemgrpc.GenerateKey()) // once per logical call
//
// Every call made with ctx gets the same key, so make one logical call per
// such context (the caller's retries of it included). It is the key of a
// call this process makes, not of the call it serves (idem.KeyFrom's).
func ContextWithOutgoingKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, outgoingKeyCtx{}, key)
}

// OutgoingKeyFromContext returns the key set by ContextWithOutgoingKey.
func OutgoingKeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(outgoingKeyCtx{}).(string)
	return k, ok
}

// GenerateKey returns a fresh key, a UUIDv7, as idemhttp.GenerateKey does.
func GenerateKey() string { return idemhttp.GenerateKey() }

// ClientOption configures the client interceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	selector func(fullMethod string) bool
	newKey   func() string
}

// WithClientMethods sets which unary methods get a key: those for which f,
// given the full method name, returns true (default: every unary method).
func WithClientMethods(f func(fullMethod string) bool) ClientOption {
	return func(c *clientConfig) { c.selector = f }
}

// WithKeyFunc sets the function that returns a fresh key (default: a
// UUIDv7, GenerateKey).
func WithKeyFunc(f func() string) ClientOption { return func(c *clientConfig) { c.newKey = f } }

// UnaryClientInterceptor returns an interceptor that sets the
// idempotency-key metadata on outgoing unary calls that do not carry one.
// The key is, in order:
//
//  1. the call's own outgoing idempotency-key metadata, when set: left
//     untouched;
//  2. the key in ctx from ContextWithOutgoingKey, verbatim;
//  3. inside an idempotent call (a generated wrapper, an idemhttp handler
//     or a handler behind UnaryServerInterceptor: idem.KeyFrom(ctx) is
//     set), a key derived from it for this call's place in the call's
//     sequence of calls of fullMethod: idem.Derive(parent, "grpc
//     "+fullMethod) for the first, with " #n" appended to the step for the
//     n-th. Two calls of one method in one call are two calls with two
//     keys (two identical charges are two effects, and two different
//     requests are not refused as a reused key), and a retry of the whole
//     call from the top derives the same keys in the same order, so a
//     chain A→B→C deduplicates at every hop. A call made again with the
//     same request after the method's last call ended with a status a
//     retry may fix (one DefaultPolicy does not store: Unavailable,
//     DeadlineExceeded, Aborted, ...) is that call's retry and gets its
//     key again. Calls of one method made concurrently take their places
//     in the order they start, which a retry may not repeat: give them
//     their own keys (ContextWithOutgoingKey with idem.Derive steps);
//  4. otherwise a fresh key.
//
// The key is set once, before grpc-go's own retries (a service config
// retry policy) and hedging, which resend the same metadata: every attempt
// of the call carries the same key. A caller that retries by calling again
// must carry the key in ctx (ContextWithOutgoingKey, once, outside its
// loop) or be inside an idempotent call (case 3).
//
// It panics if an option is nil or given a nil function, with a message
// naming it.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	cfg := clientConfig{selector: func(string) bool { return true }, newKey: GenerateKey}
	for _, o := range opts {
		if o == nil {
			panic("idemgrpc: UnaryClientInterceptor: a nil ClientOption")
		}
		o(&cfg)
	}
	switch {
	case cfg.selector == nil:
		panic("idemgrpc: WithClientMethods(nil)")
	case cfg.newKey == nil:
		panic("idemgrpc: WithKeyFunc(nil)")
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if !cfg.selector(method) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		ctx, sc := withOutgoingKey(ctx, method, req, cfg.newKey)
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		sc.ended(err)
		return err
	}
}

func withOutgoingKey(ctx context.Context, method string, req any, newKey func() string) (context.Context, *stepCall) {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(MetadataKey)) > 0 {
		return ctx, nil
	}
	key, sc := clientKey(ctx, method, req, newKey)
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, key), sc
}

// ClientKey returns the key the client interceptor sends for a call of
// fullMethod made with ctx, by its rules 2 to 4 (newKey nil means
// GenerateKey). A caller that wants to log the key, or to retry with it by
// hand, calls it once and passes the result to ContextWithOutgoingKey.
// Inside an idempotent call (rule 3) every call of ClientKey takes the next
// key of fullMethod's sequence, as a call through the interceptor does.
func ClientKey(ctx context.Context, fullMethod string, newKey func() string) string {
	k, _ := clientKey(ctx, fullMethod, nil, newKey)
	return k
}

func clientKey(ctx context.Context, fullMethod string, req any, newKey func() string) (string, *stepCall) {
	if k, ok := OutgoingKeyFromContext(ctx); ok && k != "" {
		return k, nil
	}
	if parent, ok := idem.KeyFrom(ctx); ok && parent != "" {
		v, _ := idem.CallScoped(ctx, stepsKey{}, func() any { return &steps{m: map[string]*step{}} })
		sc := v.(*steps).next(fullMethod, requestSum(req))
		return idem.Derive(parent, sc.stepName()), sc
	}
	if newKey == nil {
		newKey = GenerateKey
	}
	return newKey(), nil
}

// stepsKey is the idem.CallScoped key of a call's downstream sequence.
type stepsKey struct{}

// steps is the sequence of the downstream calls one idempotent call made,
// by full method name: the n-th call of a method gets the n-th key derived
// for it, and a retry of the idempotent call starts the sequence again.
type steps struct {
	mu sync.Mutex
	m  map[string]*step
}

// step is the state of one method's sequence: how many keys it handed out,
// and how its last call ended.
type step struct {
	n         int
	sum       [32]byte // the last call's request (requestSum), zero unknown
	retryable bool     // the last call ended with a status a retry may fix
	running   int      // calls of the method in flight
}

// stepCall is one call's place in its method's sequence.
type stepCall struct {
	s      *steps
	method string
	n      int
}

// next takes the key for a call of method with the request sum: the key of
// the method's last call again when that call ended with a status a retry
// may fix and sent the same request (the caller retries by calling again),
// else the next one.
func (s *steps) next(method string, sum [32]byte) *stepCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[method]
	if st == nil {
		st = &step{}
		s.m[method] = st
	}
	if !(st.n > 0 && st.running == 0 && st.retryable && st.sum == sum) {
		st.n++
	}
	st.sum, st.retryable = sum, false
	st.running++
	return &stepCall{s: s, method: method, n: st.n}
}

// ended records how the call ended: err is what the invoker returned.
func (c *stepCall) ended(err error) {
	if c == nil {
		return
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	st := c.s.m[c.method]
	st.running--
	if st.n == c.n {
		st.retryable = err != nil && !DefaultPolicy(status.Code(err))
	}
}

// stepName is what the call's key is derived with: "grpc <method>" for the
// first call of the method (the derivation of earlier releases, so keys in
// flight across an upgrade stay the same), "grpc <method> #n" after.
func (c *stepCall) stepName() string {
	if c.n == 1 {
		return "grpc " + c.method
	}
	return "grpc " + c.method + " #" + strconv.Itoa(c.n)
}

// requestSum is the SHA-256 of req's deterministic wire bytes, or zero when
// req is not a proto.Message (or is nil): two requests with zero sums count
// as the same.
func requestSum(req any) [32]byte {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return [32]byte{}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}
