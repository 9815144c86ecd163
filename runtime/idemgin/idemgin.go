// Package idemgin makes gin handlers idempotent by the Idempotency-Key
// request header: it is runtime/idemhttp's middleware as gin middleware,
// with idemhttp's semantics unchanged (the key rules, the problem+json
// refusals, byte-for-byte replay with Idempotent-Replayed, the stored-header
// allow-list, tenancy, body limits, streaming, panics). It takes
// idemhttp's options.
//
// The operation that scopes keys is the method and gin's route
// (c.FullPath(): "POST /orders/:id"), unless idemhttp.WithOperation says
// otherwise; a request that matched no route falls back to the path, as in
// idemhttp.
//
// Under idemhttp.WithTenant the tenant reaches the handlers in
// c.Request.Context() (idem.ContextWithTenant), and in c itself (under
// idem.DoorContextKey): pass either to generated
// wrappers, which then scope their records by the caller whatever their
// executor's tenancy (Example_tenantToWrapper). A wrapper's refusal that a
// handler records with c.Error, writing nothing, is answered by
// idemhttp.WriteError, naming the business key that decided.
//
// It is its own Go module, so that no user of the runtime inherits gin.
package idemgin

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// New returns gin middleware that makes the handlers after it idempotent,
// on ex's store, as idemhttp.New does for a net/http handler: see it for
// the rules, the answers and the options. Exactly one of
// idemhttp.WithTenant and idemhttp.SingleTenant is required; New panics,
// as idemhttp.New does, if it is missing, if ex is nil or if an option is
// invalid.
//
// A request the middleware answers itself (a refusal, a replay) is aborted
// (c.Abort): the handlers after it do not run. The handlers see the
// request's body unchanged (the middleware read it whole, up to
// idemhttp.WithMaxBody), and c.Request.Context() carries what idemhttp's
// handler context carries: the tenant idemhttp.WithTenant named
// (idem.ContextWithTenant, so that the wrapped methods the handlers call
// with it are scoped by that tenant whatever their executor's tenancy),
// the wrapped methods' decisions, no cancellation unless
// idemhttp.WithClientCancellation. Pass c.Request.Context() to wrapped
// methods, or c itself: the middleware stores that context under
// idem.DoorContextKey (c.Set), where the runtime finds the tenant and the
// rest when c has no fallback to its request's context
// (gin.Engine.ContextWithFallback off, gin's default).
//
// A handler that records a wrapped method's error with c.Error and writes
// nothing gets it answered as idemhttp.WriteError answers it, naming the
// layer that decided (409 business-key-in-progress with the wrapper's
// Retry-After, 422 business-key-reused, 403 missing-tenant, …).
func New(ex *idem.Executor, opts ...idemhttp.Option) gin.HandlerFunc {
	mw := idemhttp.New(ex, opts...)
	return func(c *gin.Context) {
		outer, req := c.Writer, c.Request
		ran := false
		defer func() { c.Writer, c.Request = outer, req }() // a panic included: gin's recovery writes to the client
		r := req.WithContext(req.Context())
		if r.Pattern == "" {
			r.Pattern = c.FullPath()
		}
		mw(http.HandlerFunc(func(w http.ResponseWriter, r2 *http.Request) {
			ran = true
			// The door's context, for a handler that passes c itself to
			// a wrapped method: without gin.Engine.ContextWithFallback,
			// c.Value reaches c.Keys and not c.Request.Context(), and the
			// runtime falls back to the context stored here.
			c.Set(idem.DoorContextKey, r2.Context())
			if w == http.ResponseWriter(outer) {
				// Passed through (another method, or WithOptionalKey and
				// no key): the chain runs on gin's own writer, with the
				// request's tenant in its context (a copy of the request
				// under idemhttp.WithTenant).
				if r2 != r {
					r2.Pattern = req.Pattern
					c.Request = r2
				}
				c.Next()
				return
			}
			// The status gin's writer holds so far: 200, or what gin set
			// before the chain (404 or 405 for a request no route
			// matches), or what an earlier handler set with c.Status.
			gw := &writer{w: w, size: -1, status: outer.Status(), outer: outer}
			c.Writer, c.Request = gw, r2
			c.Next()
			if !gw.Written() {
				writeError(gw, c.Errors, opts)
			}
			gw.WriteHeaderNow() // as gin does after the chain: a status set with c.Status alone
		})).ServeHTTP(outer, r)
		if !ran {
			c.Abort()
		}
	}
}

// writeError answers, when the handlers wrote nothing, the last error they
// recorded (c.Error) that idemhttp has a rule for: a wrapped method's
// refusal, as idemhttp.WriteError answers it.
func writeError(w http.ResponseWriter, errs []*gin.Error, opts []idemhttp.Option) {
	for i := len(errs) - 1; i >= 0; i-- {
		if errs[i] != nil && idemhttp.WriteError(w, errs[i].Err, opts...) {
			return
		}
	}
}

// writer is the gin.ResponseWriter the handlers see during a keyed request:
// gin's own semantics (the status is held until the body or
// WriteHeaderNow) over idemhttp's recording writer.
type writer struct {
	w      http.ResponseWriter
	outer  gin.ResponseWriter
	size   int
	status int
}

var _ gin.ResponseWriter = (*writer)(nil)

// Header returns the header map the handler edits.
func (g *writer) Header() http.Header { return g.w.Header() }

// WriteHeader records the status until the body or WriteHeaderNow.
func (g *writer) WriteHeader(code int) {
	if code > 0 && g.status != code && !g.Written() {
		g.status = code
	}
}

// WriteHeaderNow writes the status, once.
func (g *writer) WriteHeaderNow() {
	if !g.Written() {
		g.size = 0
		g.w.WriteHeader(g.status)
	}
}

// Write writes the status, then p.
func (g *writer) Write(p []byte) (int, error) {
	g.WriteHeaderNow()
	n, err := g.w.Write(p)
	g.size += n
	return n, err
}

// WriteString is Write for strings.
func (g *writer) WriteString(s string) (int, error) { return g.Write([]byte(s)) }

// Status returns the status set so far.
func (g *writer) Status() int { return g.status }

// Size returns the bytes of body written, -1 before the status was written.
func (g *writer) Size() int { return g.size }

// Written reports whether the status was written.
func (g *writer) Written() bool { return g.size != -1 }

// Hijack takes the connection over; the response is then not stored.
func (g *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if g.size < 0 {
		g.size = 0
	}
	return http.NewResponseController(g.w).Hijack()
}

// Flush writes the status and streams what was written so far.
func (g *writer) Flush() {
	g.WriteHeaderNow()
	_ = http.NewResponseController(g.w).Flush()
}

// CloseNotify is gin's own writer's.
func (g *writer) CloseNotify() <-chan bool {
	return g.outer.CloseNotify()
}

// Pusher returns nil: a pushed response would bypass the stored one.
func (g *writer) Pusher() http.Pusher { return nil }

// Unwrap returns idemhttp's writer, for http.ResponseController.
func (g *writer) Unwrap() http.ResponseWriter { return g.w }
