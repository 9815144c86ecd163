// Package idemadmin serves a store's records to operators over HTTP: an
// http.Handler that a service mounts on its admin port, as it mounts
// net/http/pprof, answering in JSON what idem.AdminStore answers: look up a
// record, list records, count them, and (only when AllowForget is given)
// forget one so that the next call runs again.
//
// # Who reaches which records
//
// The handler authenticates nobody: the service's own middleware does, and
// the handler's authorisation hook (Authorize, required) turns what it
// authenticated into the Scope of each request: one tenant's records, or
// every tenant's. A request confined to a tenant is served through
// Confine on every route, by hex ID or by parts, read, list, count and
// forget: a record of another tenant is answered exactly as a record that
// does not exist (404, the same text, no payload), and forget cannot touch
// it; a tenant= parameter naming another tenant is 403 ("other-tenant"),
// decided before the store is asked. A hook that returns an error, or a
// Scope with no tenant, refuses the request (403, "unauthorised").
//
// NewHandler panics without a hook: serving every tenant's records to
// whoever reaches the handler is said explicitly, with
// UnauthenticatedAllTenants (docs/decisions/admin-scope.md). Forgetting a
// record needs AllowForget too, whose function names who asks for the
// audit line.
//
// A store that keeps no tenant with its records (redisstore) cannot show
// that a record found by its hex ID is the tenant's: a confined request
// finds its records there by parts (/lookup) only, and its listing and
// counting by tenant are refused (400) as they are for every request.
//
// # Routes
//
// Relative to where it is mounted (use http.StripPrefix); Routes returns
// the same table:
//
//	GET  /records/{key}             one record by its hex key ID
//	GET  /lookup?tenant=&op=&part=  one record by the key a caller builds (idem.NewKey: parts in order)
//	GET  /records?op=&tenant=&status=&stuck=1&max_age=&min_age=&limit=&cursor=
//	GET  /stuck?op=&tenant=&limit=&cursor=   PROCESSING records past their lease
//	GET  /stats?op=&tenant=
//	POST /records/{key}/forget      {"token": "N", "status": "SUCCEEDED", "force": false, "reason": "..."}
//
// A confined request may leave tenant= out: its tenant is the scope's.
//
// Errors are {"error": "...", "rule": "..."} with 404 (not-found: no such
// record, or another tenant's), 409 (lease-live, record-changed: the
// record changed since it was looked at), 400 (bad-request, unsupported: a
// filter the store cannot apply), 403 (unauthorised, other-tenant,
// forget-not-allowed) or 503 (store-unavailable: the store failed; its
// schema is missing).
package idemadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Handler serves an idem.AdminStore's records; see the package
// documentation.
type Handler struct {
	store     idem.AdminStore
	authorize func(*http.Request) (Scope, error) // nil: UnauthenticatedAllTenants
	who       func(*http.Request) string         // AllowForget's; nil: forget is refused
	adminOpts []idem.AdminOption
	mux       *http.ServeMux
}

// Option configures a Handler.
type Option func(*handlerConfig)

type handlerConfig struct {
	authorize       func(*http.Request) (Scope, error)
	unauthenticated bool
	who             func(*http.Request) string
	adminOpts       []idem.AdminOption
}

// Authorize is the handler's authorisation hook, called for every request
// before any route: it returns the Scope the request may reach (one tenant's
// records, or every tenant's), from what the service's middleware
// authenticated, or an error, which refuses the request (403, the error's
// text in the answer). A Scope that names no tenant and not every tenant
// is refused too. One of Authorize and UnauthenticatedAllTenants is
// required.
func Authorize(f func(*http.Request) (Scope, error)) Option {
	return func(c *handlerConfig) { c.authorize = f }
}

// UnauthenticatedAllTenants serves every tenant's records to every request
// that reaches the handler, without asking who sends it: for a handler
// mounted behind the service's own authentication of operators who may see
// every tenant, or on a port only they reach. It is the explicit
// alternative to Authorize.
func UnauthenticatedAllTenants() Option {
	return func(c *handlerConfig) { c.unauthenticated = true }
}

// AllowForget lets POST /records/{key}/forget forget records; who names the
// operator asking (for the audit line idem.Admin writes), from what the
// caller's middleware authenticated. A request for which it returns "" is
// refused (403).
func AllowForget(who func(*http.Request) string) Option {
	return func(c *handlerConfig) { c.who = who }
}

// WithAdminOptions passes options to the idem.Admin behind the handler
// (the audit logger, the forget observer).
func WithAdminOptions(opts ...idem.AdminOption) Option {
	return func(c *handlerConfig) { c.adminOpts = append(c.adminOpts, opts...) }
}

// Route is one route of the handler: its method and path as a
// net/http.ServeMux pattern, relative to where the handler is mounted, and
// what it answers.
type Route struct {
	Method  string
	Path    string
	Summary string
}

// route is a Route and the function that serves it. A route reaches the
// store only through recs, which the handler builds from the request's
// Scope before it calls serve: no route can be served unconfined.
type route struct {
	Route
	serve func(h *Handler, w http.ResponseWriter, r *http.Request, recs records)
}

// routes is the handler's one route table: NewHandler registers these and
// nothing else, and Routes returns them (the confinement test enumerates
// them).
var routes = []route{
	{Route{"GET", "/records/{key}", "one record by its hex key ID"}, (*Handler).get},
	{Route{"GET", "/lookup", "one record by the key a caller builds: tenant=, op=, part= per key part in order (idem.NewKey)"}, (*Handler).lookup},
	{Route{"GET", "/records", "records by op=, tenant=, status=, stuck=1, max_age=, min_age=, newest first, limit= and cursor="}, (*Handler).list},
	{Route{"GET", "/stuck", "PROCESSING records past their lease, by op=, tenant=, limit=, cursor="}, (*Handler).stuck},
	{Route{"GET", "/stats", "counts by operation and status, by op=, tenant="}, (*Handler).stats},
	{Route{"POST", "/records/{key}/forget", "forget the version looked at: {\"token\": \"N\", \"status\": \"SUCCEEDED\", \"force\": false, \"reason\": \"...\"}"}, (*Handler).forget},
}

// Routes returns the handler's routes, in the order of its route table.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, rt := range routes {
		out[i] = rt.Route
	}
	return out
}

// NewHandler returns a Handler over store, which must implement
// idem.AdminStore (an error wrapping errors.ErrUnsupported otherwise).
//
// It panics unless exactly one of Authorize and UnauthenticatedAllTenants
// is given: who may read which tenant's records is a security decision,
// written where the handler is built, and a handler without one would
// serve every tenant's records to whoever reaches it. Such a mistake is in
// the program, not in a request (as idem.NewExecutor and idemhttp.New do).
func NewHandler(store idem.Store, opts ...Option) (*Handler, error) {
	var c handlerConfig
	for _, o := range opts {
		if o == nil {
			panic("idemadmin: NewHandler: a nil Option")
		}
		o(&c)
	}
	switch {
	case c.authorize == nil && !c.unauthenticated:
		panic("idemadmin: NewHandler: an authorisation hook is required: idemadmin.Authorize(f), whose f names the tenant each request may reach " +
			"(or every tenant), or idemadmin.UnauthenticatedAllTenants() to serve every tenant's records to whoever reaches the handler")
	case c.authorize != nil && c.unauthenticated:
		panic("idemadmin: NewHandler: Authorize and UnauthenticatedAllTenants both given: choose one")
	}
	as, ok := store.(idem.AdminStore)
	if !ok {
		return nil, fmt.Errorf("idemadmin: %T does not implement idem.AdminStore: %w", store, errors.ErrUnsupported)
	}
	if _, err := idem.NewAdmin(as, c.adminOpts...); err != nil {
		return nil, err
	}
	h := &Handler{store: as, authorize: c.authorize, who: c.who, adminOpts: c.adminOpts, mux: http.NewServeMux()}
	for _, rt := range routes {
		h.mux.HandleFunc(rt.Method+" "+rt.Path, h.scoped(rt.serve))
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// records is the store as one request may reach it: confined to its
// tenant (*Confined) or every tenant's (allTenants).
type records interface {
	idem.AdminStore
	// lookupParts looks up the key callers build for op and parts, in the
	// tenant the request names (tenant=) and its scope allows.
	lookupParts(ctx context.Context, tenant string, hasTenant bool, op string, parts []string) (idem.Entry, error)
}

// allTenants is the store unconfined.
type allTenants struct{ idem.AdminStore }

func (a allTenants) lookupParts(ctx context.Context, tenant string, _ bool, op string, parts []string) (idem.Entry, error) {
	k, err := idem.NewKey(tenant, op, parts...)
	if err != nil {
		return idem.Entry{}, err
	}
	return a.Lookup(ctx, k)
}

func (c *Confined) lookupParts(ctx context.Context, tenant string, hasTenant bool, op string, parts []string) (idem.Entry, error) {
	if hasTenant && tenant != c.tenant {
		return idem.Entry{}, ErrOtherTenant
	}
	return c.LookupParts(ctx, op, parts...)
}

// scoped serves a route with the store as the request's Scope reaches it.
func (h *Handler) scoped(serve func(*Handler, http.ResponseWriter, *http.Request, records)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.authorize == nil {
			serve(h, w, r, allTenants{h.store})
			return
		}
		s, err := h.authorize(r)
		if err == nil {
			if why := s.invalid(); why != "" {
				err = errors.New(why)
			}
		}
		if err != nil {
			fail(w, http.StatusForbidden, "unauthorised", fmt.Errorf("idemadmin: the request is not authorised: %w", err))
			return
		}
		if s.AllTenants {
			serve(h, w, r, allTenants{h.store})
			return
		}
		serve(h, w, r, Confine(h.store, s.Tenant))
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// StatusOf returns the HTTP status that answers err.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrOtherTenant):
		return http.StatusForbidden
	case errors.Is(err, idem.ErrLeaseLive), errors.Is(err, idem.ErrRecordChanged):
		return http.StatusConflict
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// ruleOf names the rule that answers err (the "rule" of the error's JSON).
func ruleOf(err error) string {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return "not-found"
	case errors.Is(err, ErrOtherTenant):
		return "other-tenant"
	case errors.Is(err, idem.ErrLeaseLive):
		return "lease-live"
	case errors.Is(err, idem.ErrRecordChanged):
		return "record-changed"
	case errors.Is(err, errors.ErrUnsupported):
		return "unsupported"
	}
	return "store-unavailable"
}

// fail answers {"error": err's text, "rule": rule}.
func fail(w http.ResponseWriter, code int, rule string, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error(), "rule": rule})
}

// failStore answers an error of the store (or of the request's scope).
func failStore(w http.ResponseWriter, err error) { fail(w, StatusOf(err), ruleOf(err), err) }

func (h *Handler) get(w http.ResponseWriter, r *http.Request, recs records) {
	k, err := idem.KeyFromHex(r.PathValue("key"))
	if err != nil {
		fail(w, http.StatusBadRequest, "bad-request", err)
		return
	}
	e, err := recs.Lookup(r.Context(), k)
	answer(w, e, err)
}

func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, recs records) {
	q := r.URL.Query()
	if _, err := idem.NewKey(q.Get("tenant"), q.Get("op"), q["part"]...); err != nil || q.Get("op") == "" {
		fail(w, http.StatusBadRequest, "bad-request", errors.Join(errors.New("idemadmin: lookup needs op and one part= per key part, in order (tenant= unless single-tenant)"), err))
		return
	}
	e, err := recs.lookupParts(r.Context(), q.Get("tenant"), q.Has("tenant"), q.Get("op"), q["part"])
	answer(w, e, err)
}

func answer(w http.ResponseWriter, e idem.Entry, err error) {
	if err != nil {
		failStore(w, err)
		return
	}
	writeJSON(w, http.StatusOK, View(e))
}

// ListQuery reads a listing's query parameters.
func ListQuery(r *http.Request) (idem.ListQuery, error) {
	v := r.URL.Query()
	q := idem.ListQuery{Op: v.Get("op"), Cursor: v.Get("cursor")}
	if v.Has("tenant") {
		q.Tenant, q.ByTenant = v.Get("tenant"), true
	}
	st, ok := ParseStatus(v.Get("status"))
	if !ok {
		return q, errors.New("idemadmin: status: PROCESSING, SUCCEEDED or FAILED_FINAL")
	}
	q.Status = st
	q.Stuck = v.Get("stuck") == "1" || v.Get("stuck") == "true"
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"max_age", &q.MaxAge}, {"min_age", &q.MinAge}} {
		if s := v.Get(d.name); s != "" {
			x, err := time.ParseDuration(s)
			if err != nil || x < 0 {
				return q, errors.New("idemadmin: " + d.name + ": a duration such as 90s or 2h")
			}
			*d.to = x
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, errors.New("idemadmin: limit: a positive number")
		}
		q.Limit = n
	}
	return q, nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, recs records) {
	q, err := ListQuery(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "bad-request", err)
		return
	}
	page(w, r, recs, q)
}

func (h *Handler) stuck(w http.ResponseWriter, r *http.Request, recs records) {
	q, err := ListQuery(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "bad-request", err)
		return
	}
	q.Stuck = true
	page(w, r, recs, q)
}

func page(w http.ResponseWriter, r *http.Request, recs records, q idem.ListQuery) {
	p, err := recs.List(r.Context(), q)
	if err != nil {
		failStore(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ViewPage(p))
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request, recs records) {
	v := r.URL.Query()
	q := idem.StatsQuery{Op: v.Get("op")}
	if v.Has("tenant") {
		q.Tenant, q.ByTenant = v.Get("tenant"), true
	}
	st, err := recs.Stats(r.Context(), q)
	if err != nil {
		failStore(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ViewStats(st))
}

// ForgetBody is the body of POST /records/{key}/forget: the version looked
// at (token and status of the lookup), force and a reason for the audit
// line.
type ForgetBody struct {
	Token  idem.Token `json:"token,string"`
	Status string     `json:"status"`
	Force  bool       `json:"force"`
	Reason string     `json:"reason"`
}

func (h *Handler) forget(w http.ResponseWriter, r *http.Request, recs records) {
	if h.who == nil {
		fail(w, http.StatusForbidden, "forget-not-allowed", errors.New("idemadmin: forget is not allowed on this handler (idemadmin.AllowForget)"))
		return
	}
	who := h.who(r)
	if who == "" {
		fail(w, http.StatusForbidden, "forget-not-allowed", errors.New("idemadmin: forget: no operator named for this request"))
		return
	}
	k, err := idem.KeyFromHex(r.PathValue("key"))
	if err != nil {
		fail(w, http.StatusBadRequest, "bad-request", err)
		return
	}
	var b ForgetBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		fail(w, http.StatusBadRequest, "bad-request", errors.New("idemadmin: forget: body {\"token\": \"N\", \"status\": \"...\", \"force\": false, \"reason\": \"...\"}: "+err.Error()))
		return
	}
	st, ok := ParseStatus(b.Status)
	if !ok || st == 0 || b.Token == 0 {
		fail(w, http.StatusBadRequest, "bad-request", errors.New("idemadmin: forget: the token and status of the record looked at are required"))
		return
	}
	a, err := idem.NewAdmin(recs, h.adminOpts...)
	if err == nil {
		err = a.Forget(r.Context(), idem.ForgetRequest{Key: k, Token: b.Token, Status: st, Force: b.Force, By: who, Reason: b.Reason})
	}
	if err != nil {
		failStore(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"forgotten": k.Hex()})
}
