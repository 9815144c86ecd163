// Package idemecho makes echo (v4) handlers idempotent by the
// Idempotency-Key request header: it is runtime/idemhttp's middleware as
// echo middleware, with idemhttp's semantics unchanged (the key rules, the
// problem+json refusals, byte-for-byte replay with Idempotent-Replayed, the
// stored-header allow-list, tenancy, body limits, streaming, panics). It
// takes idemhttp's options.
//
// The operation that scopes keys is the method and echo's route
// (c.Path(): "POST /orders/:id"), unless idemhttp.WithOperation says
// otherwise. Register it with e.Use (after routing), not e.Pre, which runs
// before the route is known.
//
// Under idemhttp.WithTenant the tenant reaches the handlers in
// c.Request().Context() (idem.ContextWithTenant): pass it to generated
// wrappers, which then scope their records by the caller whatever their
// executor's tenancy (Example_tenantToWrapper). A wrapper's refusal that a
// handler returns is answered by idemhttp.WriteError, naming the business
// key that decided.
//
// It is its own Go module, so that no user of the runtime inherits echo.
package idemecho

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// New returns echo middleware that makes the handlers after it idempotent,
// on ex's store, as idemhttp.New does for a net/http handler: see it for
// the rules, the answers and the options. Exactly one of
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
// echo instance's HTTPErrorHandler (c.Error). The handlers see the
// request's body unchanged (the middleware read it whole, up to
// idemhttp.WithMaxBody), and c.Request().Context() carries what idemhttp's
// handler context carries: the tenant idemhttp.WithTenant named
// (idem.ContextWithTenant, so that the wrapped methods the handler calls
// with it are scoped by that tenant whatever their executor's tenancy),
// the wrapped methods' decisions, no cancellation unless
// idemhttp.WithClientCancellation. Pass c.Request().Context() to wrapped
// methods (echo.Context is no context.Context).
func New(ex *idem.Executor, opts ...idemhttp.Option) echo.MiddlewareFunc {
	mw := idemhttp.New(ex, opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			outer, req := c.Response(), c.Request()
			defer func() { c.SetResponse(outer); c.SetRequest(req) }() // a panic included: echo's Recover answers on the client's response
			r := req.WithContext(req.Context())
			if r.Pattern == "" {
				r.Pattern = c.Path()
			}
			var passErr error
			mw(http.HandlerFunc(func(w http.ResponseWriter, r2 *http.Request) {
				if w == http.ResponseWriter(outer) {
					// Passed through (another method, or WithOptionalKey
					// and no key): the chain runs as without the
					// middleware, its error returned, with the request's
					// tenant in its context (a copy of the request under
					// idemhttp.WithTenant).
					if r2 != r {
						r2.Pattern = req.Pattern
						c.SetRequest(r2)
					} else {
						c.SetRequest(req)
					}
					passErr = next(c)
					return
				}
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				c.SetRequest(r2)
				if err := next(c); err != nil {
					// A wrapped method's refusal is answered as idemhttp
					// answers it, naming the layer that decided (the
					// business key); every other error by echo's handler.
					if c.Response().Committed || !idemhttp.WriteError(c.Response(), err, opts...) {
						c.Error(err)
					}
				}
			})).ServeHTTP(outer, r)
			return passErr
		}
	}
}
