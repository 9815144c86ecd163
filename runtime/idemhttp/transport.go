package idemhttp

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/runtime/idem"
)

type outgoingKeyCtx struct{}

// ContextWithOutgoingKey returns ctx carrying key as the Idempotency-Key
// that Transport sends, verbatim, on the requests made with ctx. Use it
// when the caller already has a key (one it logs, one from its own client,
// or idem.Derive), or to keep one fresh key across a retry loop that
// builds a new *http.Request for each attempt:
//
//	ctx = idemhttp.ContextWithOutgoingKey(ctx, idemhttp.GenerateKey()) // once per logical request
//
// Every request made with ctx gets the same key, so make one logical
// request per such context (retries of it included). It is the key of a
// request this process sends, not the key of the call it serves: that one
// is idem.KeyFrom's.
func ContextWithOutgoingKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, outgoingKeyCtx{}, key)
}

// OutgoingKeyFromContext returns the key set by ContextWithOutgoingKey.
func OutgoingKeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(outgoingKeyCtx{}).(string)
	return k, ok
}

// GenerateKey returns a fresh Idempotency-Key: a UUIDv7 (time-ordered, so
// store indexes stay compact) in its canonical text form. (idem.NewKey is
// another thing: the store key of a call, built from its scope and parts.)
func GenerateKey() string {
	u, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString() // the random source failed for v7; v4 panics instead
	}
	return u.String()
}

// SendOnce is an http.RoundTripper that sends each request at most once:
// unlike an *http.Transport on its own, it never resends a request that may
// have reached the server.
//
// net/http's Transport resends a request by itself when a reused keep-alive
// connection breaks before the response arrives and the request "looks
// replayable": its body is empty or can be rewound (GetBody), and its
// method is GET, HEAD, OPTIONS or TRACE or it has an Idempotency-Key or
// X-Idempotency-Key header. A server that closed the connection after it
// read such a request may have acted on it, and a server that does not
// honour the key acts on it twice. SendOnce removes both conditions: a
// request with a body is sent without GetBody (the Transport cannot rewind
// it, so it does not resend it), and a request without a body that would
// be resent (every method but GET, HEAD, OPTIONS and TRACE without a key) goes
// over a fresh connection, never a reused one (the Transport resends only
// on a reused connection). A request that was never written (the
// connection broke before its first byte) may still be sent again on
// another connection: the server cannot have seen it. The caller's own
// retries (a retry loop, http.Client following a 307 or 308) are the
// caller's and are not affected.
//
// Build it with NewSendOnce; it must not be copied after use.
type SendOnce struct {
	reuse *http.Transport // keep-alive connections: requests it will not resend
	fresh *http.Transport // a new connection per request
}

// NewSendOnce returns a SendOnce over base (nil: a clone of
// http.DefaultTransport). The connections of requests without a body that
// would otherwise be resendable are base's settings on a clone with
// keep-alives off. CloseIdleConnections closes both.
func NewSendOnce(base *http.Transport) *SendOnce {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	fresh := base.Clone()
	fresh.DisableKeepAlives = true
	return &SendOnce{reuse: base, fresh: fresh}
}

// RoundTrip sends req once.
func (s *SendOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody != nil {
			req = req.WithContext(req.Context()) // a shallow copy, to leave the caller's GetBody alone
			req.GetBody = nil
		}
		return s.reuse.RoundTrip(req)
	}
	if safeMethod(req.Method) && !hasKeyHeader(req.Header) {
		return s.reuse.RoundTrip(req) // resent only when it changes nothing
	}
	return s.fresh.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the transports.
func (s *SendOnce) CloseIdleConnections() {
	s.reuse.CloseIdleConnections()
	s.fresh.CloseIdleConnections()
}

// safeMethod reports the methods net/http's Transport treats as idempotent
// by themselves (an empty method is GET).
func safeMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// hasKeyHeader reports the header fields that make net/http's Transport
// treat a request as idempotent, in any spelling of their names.
func hasKeyHeader(h http.Header) bool {
	for k := range h {
		if strings.EqualFold(k, Header) || strings.EqualFold(k, "X-Idempotency-Key") {
			return true
		}
	}
	return false
}

// Transport is an http.RoundTripper that sets the Idempotency-Key header on
// outgoing requests (POST and PATCH by default) that do not have one, so
// that the server can tell a retry from a new request. The key is, in order:
//
//  1. the request's own Idempotency-Key header, when set: left untouched
//     (a client library that manages keys, like stripe-go, keeps control);
//  2. the key in the request's context from ContextWithOutgoingKey, verbatim;
//  3. inside an idempotent call (an idemhttp handler or a generated
//     wrapper: idem.KeyFrom(ctx) is set), idem.Derive(parent, method+" "+
//     host+path): a retry of the whole call from the top reaches this
//     downstream service with the same key as the first time, and distinct
//     endpoints get distinct keys (two calls to the same endpoint in one
//     call need ContextWithOutgoingKey with their own idem.Derive steps);
//  4. otherwise, a fresh UUIDv7.
//
// The key is generated once per logical request and kept across its
// retries. To make that hold for a client that retries by sending the same
// *http.Request again (rewinding its body with GetBody) — directly, through
// an http.Client (which forks the request per attempt when it has a
// Timeout, sharing the header map), or through a retrying RoundTripper that
// wraps this one — Transport sets the header on the request it is given,
// once, when it is absent: every later attempt finds it there (case 1).
// This is a deliberate, narrow exception to the rule that a RoundTripper
// does not modify its request (http.Client does the same for cookies), and
// it is why a *http.Request must not be sent concurrently. A retry loop
// that builds a new request per attempt must carry the key in the context
// (ContextWithOutgoingKey, once, outside the loop) instead. A retrying RoundTripper placed under this one (as
// Base) gets the header from the first attempt on. A 307 or 308 redirect
// followed by http.Client keeps the key too (the client copies the
// original request's header fields).
//
// The zero value is ready to use; a Transport must not be copied after use.
type Transport struct {
	// Base sends the requests. nil means a SendOnce over a clone of
	// http.DefaultTransport, and an *http.Transport is wrapped in a
	// SendOnce: net/http's Transport would otherwise resend a keyed
	// request by itself when a reused connection breaks (see SendOnce).
	// Any other RoundTripper is used as it is: its retries are the
	// caller's choice (wrap the *http.Transport under it with NewSendOnce).
	Base http.RoundTripper
	// Methods lists the methods that get a key; nil means POST and PATCH.
	Methods []string
	// Quoted sends the key as a structured-field string ("…"), the draft's
	// form, instead of bare, as most deployed servers expect it. The idemhttp
	// middleware accepts both. A key that bare would be read as something
	// else (one with a comma, a leading double quote, or surrounding
	// spaces) is always sent quoted.
	Quoted bool
	// GenerateKey returns a fresh key (case 4); nil means GenerateKey.
	GenerateKey func() string

	once sync.Once
	base http.RoundTripper // Base, or the SendOnce over it
}

// sender returns the RoundTripper requests go to (see Base).
func (t *Transport) sender() http.RoundTripper {
	t.once.Do(func() {
		switch b := t.Base.(type) {
		case nil:
			t.base = NewSendOnce(nil)
		case *http.Transport:
			t.base = NewSendOnce(b)
		default:
			t.base = b
		}
	})
	return t.base
}

// CloseIdleConnections closes the idle connections of the RoundTripper
// requests go to, when it has such a method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.sender().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sets the Idempotency-Key header when it applies and sends req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.sender()
	if !t.applies(req.Method) || req.Header.Get(Header) != "" {
		return base.RoundTrip(req)
	}
	key := t.keyFor(req)
	if t.Quoted || !bareSafe(key) {
		key = FormatKey(key)
	}
	if req.Header == nil {
		req = req.Clone(req.Context()) // nowhere to keep it for a retry
		req.Header = make(http.Header, 1)
	}
	req.Header.Set(Header, key)
	return base.RoundTrip(req)
}

// bareSafe reports whether key, sent bare, parses back to itself: no comma
// (a bare comma makes a list), no leading double quote (a structured-field
// string), no surrounding spaces or tabs (trimmed). Other keys are sent as
// structured-field strings, which carry them intact.
func bareSafe(key string) bool {
	return key != "" && !strings.ContainsRune(key, ',') && key[0] != '"' &&
		strings.Trim(key, " \t") == key
}

func (t *Transport) applies(method string) bool {
	if t.Methods == nil {
		return method == http.MethodPost || method == http.MethodPatch
	}
	for _, m := range t.Methods {
		if m == method {
			return true
		}
	}
	return false
}

func (t *Transport) keyFor(req *http.Request) string {
	ctx := req.Context()
	if k, ok := OutgoingKeyFromContext(ctx); ok && k != "" {
		return k
	}
	if parent, ok := idem.KeyFrom(ctx); ok && parent != "" {
		return idem.Derive(parent, req.Method+" "+req.URL.Host+req.URL.Path)
	}
	if t.GenerateKey != nil {
		return t.GenerateKey()
	}
	return GenerateKey()
}
