package idemgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
//     set), idem.Derive(parent, "grpc "+fullMethod): a retry of the whole
//     call from the top reaches this service with the key of the first
//     time, so a chain A→B→C deduplicates at every hop (two calls of the
//     same method in one call need ContextWithOutgoingKey with their own
//     idem.Derive steps);
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
		if cfg.selector(method) {
			ctx = withOutgoingKey(ctx, method, cfg.newKey)
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

func withOutgoingKey(ctx context.Context, method string, newKey func() string) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(MetadataKey)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, ClientKey(ctx, method, newKey))
}

// ClientKey returns the key the client interceptor sends for a call of
// fullMethod made with ctx, by its rules 2 to 4 (newKey nil means
// GenerateKey). A caller that wants to log the key, or to retry with it by
// hand, calls it once and passes the result to ContextWithOutgoingKey.
func ClientKey(ctx context.Context, fullMethod string, newKey func() string) string {
	if k, ok := OutgoingKeyFromContext(ctx); ok && k != "" {
		return k
	}
	if parent, ok := idem.KeyFrom(ctx); ok && parent != "" {
		return idem.Derive(parent, "grpc "+fullMethod)
	}
	if newKey == nil {
		newKey = GenerateKey
	}
	return newKey()
}
