// Package idemfiber makes Fiber (v3, fasthttp) handlers idempotent by the
// Idempotency-Key request header, with runtime/idemhttp's semantics: the
// key rules, the problem+json refusals, byte-for-byte replay with
// Idempotent-Replayed, the stored-header allow-list, tenancy, body limits,
// panics. It takes idemhttp's options, and stores what idemhttp stores: a
// key stored through idemfiber replays through idemhttp and the other way
// round.
//
// Fiber has no net/http request: for each request the middleware builds a
// *http.Request from the fasthttp one (its method, URL, header fields —
// every value of a repeated field —, host, remote address, TLS state and
// body, all copied), so that idemhttp's functions of a request (the
// tenant, the operation, the fingerprint) apply unchanged. The handlers
// after it write to Fiber's response as usual; on a keyed request the
// middleware then moves that response (status, header fields, body) into
// idemhttp's recording writer, which decides what is stored and sends it.
//
// The operation that scopes keys is the method and the path, as in
// idemhttp for a request no router named: in app.Use, Fiber has not chosen
// the route yet. Registered on a route with ForRoute, it is the method and
// the route's pattern. idemhttp.WithOperation replaces either.
//
// Differences from idemhttp on net/http, all Fiber's (see
// docs/decisions/framework-adapters.md): fasthttp sends a response once its
// handler returned, so a handler cannot stream (a flush sends nothing
// early; a body stream is read whole before it is stored); no handler
// hijacks a connection through net/http (one that hijacks it Fiber's way,
// c.RequestCtx().Hijack, has its response not stored and its key released,
// as idemhttp does on net/http); response trailers and 1xx responses are not sent;
// and fasthttp does not end a request's context when its client goes away,
// so idemhttp.WithClientCancellation has nothing to act on.
//
// Under idemhttp.WithTenant the tenant reaches the handlers in c.Context()
// (idem.ContextWithTenant): pass c.Context() (or c itself, whose values
// are fasthttp's user values: the middleware stores the door's context
// there under idem.DoorContextKey, where the runtime finds it) to
// generated wrappers; they then scope their records by the caller whatever their
// executor's tenancy (Example_tenantToWrapper). A wrapper's refusal that a
// handler returns is answered by idemhttp.WriteError, naming the business
// key that decided.
//
// It is its own Go module, so that no user of the runtime inherits Fiber.
package idemfiber

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// New returns Fiber middleware that makes the handlers after it
// idempotent, on ex's store, as idemhttp.New does for a net/http handler:
// see it for the rules, the answers and the options. Exactly one of
// idemhttp.WithTenant and idemhttp.SingleTenant is required; New panics,
// as idemhttp.New does, if it is missing, if ex is nil or if an option is
// invalid.
//
// An error a handler returns on a keyed request is answered there, so
// that the answer is the response stored or, for a 5xx, released; the
// middleware then returns nil. An error of a wrapped method (a generated
// wrapper, idem.Do) that idemhttp has a rule for is answered by
// idemhttp.WriteError, naming the layer that decided (409
// business-key-in-progress with the wrapper's Retry-After, 422
// business-key-reused, 403 missing-tenant, …); every other error by the
// app's ErrorHandler. The handlers see the request's body unchanged, and
// c.Context() is, while they run, the context idemhttp gives its handler:
// the tenant idemhttp.WithTenant named (idem.ContextWithTenant, so that
// the wrapped methods the handlers call with it are scoped by that tenant
// whatever their executor's tenancy), the wrapped methods' decisions, no
// cancellation. Pass c.Context() to wrapped methods, or c itself: a
// fiber.Ctx is a context.Context whose values are fasthttp's user values,
// and the middleware stores this context there under
// idem.DoorContextKey, where the runtime finds the tenant and the rest.
func New(ex *idem.Executor, opts ...idemhttp.Option) fiber.Handler {
	return newHandler(ex, false, opts)
}

// ForRoute is New for middleware registered on one route
// (app.Post("/orders/:id", idemfiber.ForRoute(ex, …), handler)): the
// operation that scopes keys is the method and the route's pattern
// (c.FullPath(), "POST /orders/:id") rather than the path. Do not register
// it with app.Use: there Fiber's route is the Use prefix, and every path
// under it would be one operation (two requests to two paths with one key
// would then be one request, told apart only by the fingerprint, which by
// default includes the path: a 422, not a replay).
func ForRoute(ex *idem.Executor, opts ...idemhttp.Option) fiber.Handler {
	return newHandler(ex, true, opts)
}

func newHandler(ex *idem.Executor, route bool, opts []idemhttp.Option) fiber.Handler {
	// One middleware for every request: what a request's run needs is in
	// its writer, which idemhttp's recording writer unwraps to.
	mw := idemhttp.New(ex, opts...)(http.HandlerFunc(run))
	return func(c fiber.Ctx) error {
		x := &exchange{w: writer{c: c, opts: opts}}
		if err := x.request(c, route); err != nil {
			return fiber.NewError(fiber.StatusBadRequest, err.Error())
		}
		uc := c.RequestCtx()
		original, door := c.Context(), uc.UserValue(idem.DoorContextKey)
		defer func() {
			c.SetContext(original)
			uc.SetUserValue(idem.DoorContextKey, door)
		}()
		mw.ServeHTTP(&x.w, x.r)
		if x.w.passed || x.w.hijacked {
			return x.w.passErr
		}
		return nil
	}
}

// exchange is what the middleware builds for one request, in one
// allocation: the writer idemhttp answers through and the net/http request
// it reads (r is &req, or its copy with the request's context).
type exchange struct {
	w    writer
	r    *http.Request
	req  http.Request
	url  url.URL
	body bodyReader
}

// setContext makes ctx, the door's, c.Context(), and reachable through c
// itself: c.Value answers its Locals only, where the runtime finds the
// door's context under idem.DoorContextKey (a handler that passes c to a
// wrapped method is scoped by the door's tenant, as with c.Context()).
func setContext(c fiber.Ctx, ctx context.Context) {
	c.SetContext(ctx)
	c.RequestCtx().SetUserValue(idem.DoorContextKey, ctx) // c.Locals, without its variadic slice
}

// run is the handler idemhttp's middleware calls: it runs the rest of
// Fiber's chain.
func run(w http.ResponseWriter, r *http.Request) {
	out := unwrap(w)
	c := out.c
	if w == http.ResponseWriter(out) {
		// Passed through (another method, or WithOptionalKey and no key):
		// the chain runs as without the middleware, with the request's
		// tenant in c.Context() (under idemhttp.WithTenant).
		out.passed = true
		setContext(c, r.Context())
		out.passErr = c.Next()
		return
	}
	setContext(c, r.Context())
	err := c.Next()
	if c.RequestCtx().Hijacked() {
		// The handler took the connection over (fasthttp hands it over
		// once this handler returned): what Fiber's response holds is not
		// what the handler answered, so it is not stored; the key is
		// released, as idemhttp does for a net/http handler that hijacks
		// (idemhttp.ErrHijacked). Fiber's response and an error the
		// handler returned are left to Fiber.
		out.hijacked = true
		_, _, _ = http.NewResponseController(w).Hijack()
		out.passErr = err
		return
	}
	if err != nil {
		// A wrapped method's refusal is answered as idemhttp answers it,
		// naming the layer that decided (the business key), in place of
		// what the handlers wrote; every other error by the app's handler.
		if idemhttp.WriteError(w, err, out.opts...) {
			c.Response().Reset()
			return
		}
		if herr := c.App().ErrorHandler(c, err); herr != nil {
			c.Response().Reset()
			c.Status(fiber.StatusInternalServerError)
		}
	}
	move(c, w)
}

// unwrap finds the request's writer under the writers idemhttp wraps it in.
func unwrap(w http.ResponseWriter) *writer {
	for {
		switch x := w.(type) {
		case *writer:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			panic(fmt.Sprintf("idemfiber: idemhttp's writer %T does not unwrap to the request's", w))
		}
	}
}

// request builds the net/http request idemhttp reads into x.r; every
// string is a copy (fasthttp reuses its buffers once the request ends),
// the request URI, the method, the host and the header fields' names and
// values all in one.
func (x *exchange) request(c fiber.Ctx, route bool) error {
	fr := c.Request()
	rawURI, method, host := fr.RequestURI(), fr.Header.Method(), fr.Host()
	var addrBuf [64]byte
	remote := appendAddr(addrBuf[:0], c.RequestCtx().RemoteAddr())
	n, size := 0, len(rawURI)+len(method)+len(host)+len(remote)
	for k, v := range fr.Header.All() {
		n, size = n+1, size+len(k)+len(v)
	}
	arena := make([]byte, 0, size)
	arena = append(append(append(append(arena, rawURI...), method...), host...), remote...)
	for k, v := range fr.Header.All() {
		arena = append(append(arena, k...), v...)
	}
	all := string(arena)
	uri, all := all[:len(rawURI)], all[len(rawURI):]
	if !parseRequestURI(uri, &x.url) {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			return fmt.Errorf("idemfiber: request URI %q: %w", uri, err)
		}
		x.url = *u
	}
	body := fr.Body()
	r := &x.req
	*r = http.Request{
		Method:        all[:len(method)],
		URL:           &x.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		ContentLength: int64(len(body)),
		Host:          all[len(method) : len(method)+len(host)],
		RemoteAddr:    all[len(method)+len(host) : len(method)+len(host)+len(remote)],
		RequestURI:    uri,
		TLS:           c.RequestCtx().TLSConnectionState(),
	}
	all = all[len(method)+len(host)+len(remote):]
	if route {
		r.Pattern = c.FullPath()
	}
	if len(body) > 0 {
		x.body = bodyReader{b: body}
		r.Body = &x.body
	} else {
		r.Body = http.NoBody
	}
	r.Header = make(http.Header, n)
	vals := make([]string, 0, n)
	for k, v := range fr.Header.All() {
		key := http.CanonicalHeaderKey(all[:len(k)])
		vals = append(vals, all[len(k):len(k)+len(v)])
		all = all[len(k)+len(v):]
		if prev, ok := r.Header[key]; ok {
			r.Header[key] = append(prev[:len(prev):len(prev)], vals[len(vals)-1])
		} else {
			r.Header[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	if ctx := c.Context(); ctx != context.Background() {
		r = r.WithContext(ctx)
	}
	x.r = r
	return nil
}

// appendAddr appends addr.String() to b: for the *net.TCPAddr fasthttp
// has, without its allocations (TestAppendAddr compares the two).
func appendAddr(b []byte, addr net.Addr) []byte {
	a, ok := addr.(*net.TCPAddr)
	if !ok || a.Zone != "" {
		return append(b, addr.String()...)
	}
	var ip netip.Addr
	switch p4 := a.IP.To4(); {
	case len(a.IP) == 0:
		// no address: "" before the port, as net.JoinHostPort writes it
	case p4 != nil:
		ip = netip.AddrFrom4([4]byte(p4))
	case len(a.IP) == net.IPv6len:
		ip = netip.AddrFrom16([16]byte(a.IP))
	default:
		return append(b, addr.String()...)
	}
	if ip.Is6() {
		b = append(ip.AppendTo(append(b, '[')), ']')
	} else if ip.IsValid() {
		b = ip.AppendTo(b)
	}
	return strconv.AppendInt(append(b, ':'), int64(a.Port), 10)
}

// parseRequestURI sets *u to what url.ParseRequestURI(uri) returns, and
// reports true, when uri is a path that needs no decoding (letters, digits
// and -._~$&+,/:;=@ only, from its leading '/' to an optional '?') and a
// query of printable ASCII; it reports false, leaving the rest to
// url.ParseRequestURI, for every other uri. TestParseRequestURI compares
// the two.
func parseRequestURI(uri string, u *url.URL) bool {
	if len(uri) == 0 || uri[0] != '/' {
		return false
	}
	path, query, hasQuery := strings.Cut(uri, "?")
	for i := 0; i < len(path); i++ {
		if !plainPath[path[i]] {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// plainPath holds the bytes a path may have for parseRequestURI: those
// net/url neither decodes nor escapes in a path.
var plainPath = func() (t [256]bool) {
	for _, c := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~$&+,/:;=@") {
		t[c] = true
	}
	return t
}()

// bodyReader reads the fasthttp body, which idemhttp reads whole before
// the handler runs, while the request is live.
type bodyReader struct {
	b []byte
	i int
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.i >= len(b.b) {
		return 0, io.EOF
	}
	n := copy(p, b.b[b.i:])
	b.i += n
	return n, nil
}

func (b *bodyReader) Close() error { return nil }

// move hands the response the handlers wrote to Fiber over to idemhttp's
// writer w, and clears Fiber's: idemhttp sends it (or, when the store's
// transaction fails, a refusal) through writer.
func move(c fiber.Ctx, w http.ResponseWriter) {
	res := c.Response()
	h := w.Header()
	n, size := 0, 0
	for k, v := range res.Header.All() {
		n, size = n+1, size+len(k)+len(v)
	}
	// The header fields' names and values in one string, their values in
	// one slice.
	arena := make([]byte, 0, size)
	for k, v := range res.Header.All() {
		arena = append(append(arena, k...), v...)
	}
	all, vals := string(arena), make([]string, 0, n)
	for k, v := range res.Header.All() {
		key := all[:len(k)]
		vals = append(vals, all[len(k):len(k)+len(v)])
		all = all[len(k)+len(v):]
		if key == fiber.HeaderContentLength {
			continue // computed from the body when sent
		}
		if prev, ok := h[key]; ok {
			h[key] = append(prev[:len(prev):len(prev)], vals[len(vals)-1])
		} else {
			h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	status := res.StatusCode()
	body := bytes.Clone(res.Body()) // a body stream is read whole; w may write to res
	res.Reset()
	w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}

// writer is the http.ResponseWriter idemhttp answers through: it writes to
// Fiber's response, which fasthttp sends once the handler returned.
type writer struct {
	c      fiber.Ctx
	header http.Header
	wrote  bool

	opts    []idemhttp.Option // the middleware's, for idemhttp.WriteError
	passed  bool              // idemhttp passed r through unprotected
	passErr error             // what the chain returned then
	// hijacked: the handler hijacked the fasthttp connection (run).
	hijacked bool
}

// errHijackFiber: a handler can only hijack a Fiber connection Fiber's way.
var errHijackFiber = errors.New("idemfiber: hijack a Fiber connection with c.RequestCtx().Hijack, not through net/http")

// Hijack tells idemhttp's writer that the handler hijacked the fasthttp
// connection (run calls it then, and only then); the connection itself
// is fasthttp's to hand over, so none is returned.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.hijacked {
		return nil, nil, errHijackFiber
	}
	return nil, nil, nil
}

func (w *writer) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *writer) WriteHeader(code int) {
	if w.wrote || code < 200 {
		return // informational responses are not sent on fasthttp
	}
	w.wrote = true
	res := w.c.Response()
	res.SetStatusCode(code)
	for k, vs := range w.header {
		if k == fiber.HeaderContentLength {
			continue // computed from the body
		}
		for _, v := range vs {
			res.Header.Add(k, v)
		}
	}
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.c.Response().AppendBody(p)
	return len(p), nil
}
