package idemgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

type clientKeyCtx struct{}

// WithKey returns ctx carrying key as the idempotency key that the client
// interceptor sends, verbatim, on the calls made with ctx. Every call made
// with ctx gets the same key, so make one logical call per such context
// (the caller's retries of it included).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKeyCtx{}, key)
}

// WithNewKey returns ctx carrying a fresh UUIDv7 key, as WithKey. Call it
// once per logical call, before the caller's own retry loop: every attempt
// then carries the same key.
func WithNewKey(ctx context.Context) context.Context {
	return WithKey(ctx, idemhttp.NewKey())
}

// KeyFromContext returns the key set by WithKey or WithNewKey.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(clientKeyCtx{}).(string)
	return k, ok
}

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
// UUIDv7, idemhttp.NewKey).
func WithKeyFunc(f func() string) ClientOption { return func(c *clientConfig) { c.newKey = f } }

// UnaryClientInterceptor returns an interceptor that sets the
// idempotency-key metadata on outgoing unary calls that do not carry one.
// The key is, in order:
//
//  1. the call's own outgoing idempotency-key metadata, when set: left
//     untouched;
//  2. the key in ctx from WithKey or WithNewKey, verbatim;
//  3. inside an idempotent call (a generated wrapper, an idemhttp handler
//     or a handler behind UnaryServerInterceptor: idem.KeyFrom(ctx) is
//     set), idem.Derive(parent, "grpc "+fullMethod): a retry of the whole
//     call from the top reaches this service with the key of the first
//     time, so a chain A→B→C deduplicates at every hop (two calls of the
//     same method in one call need WithKey with their own idem.Derive
//     steps);
//  4. otherwise a fresh key.
//
// The key is set once, before grpc-go's own retries (a service config
// retry policy) and hedging, which resend the same metadata: every attempt
// of the call carries the same key. A caller that retries by calling again
// must carry the key in ctx (WithNewKey, once, outside its loop) or be
// inside an idempotent call (case 3).
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	cfg := clientConfig{selector: func(string) bool { return true }, newKey: idemhttp.NewKey}
	for _, o := range opts {
		o(&cfg)
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
// idemhttp.NewKey). A caller that wants to log the key, or to retry with
// it by hand, calls it once and passes the result to WithKey.
func ClientKey(ctx context.Context, fullMethod string, newKey func() string) string {
	if k, ok := KeyFromContext(ctx); ok && k != "" {
		return k
	}
	if parent, ok := idem.KeyFrom(ctx); ok && parent != "" {
		return idem.Derive(parent, "grpc "+fullMethod)
	}
	if newKey == nil {
		newKey = idemhttp.NewKey
	}
	return newKey()
}
