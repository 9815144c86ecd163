// Package idemadmin serves a store's records to operators over HTTP: an
// http.Handler that a service mounts on its admin port, as it mounts
// net/http/pprof, answering in JSON what idem.AdminStore answers: look up a
// record, list records, count them, and (only when AllowForget is given)
// forget one so that the next call runs again.
//
// The handler does no authentication, no authorisation and no tenancy of
// its own: it serves every tenant's records to whoever reaches it. Mount it
// behind the service's own middleware, on a port that only operators
// reach, and let that middleware decide who may read and who may forget;
// to confine a caller to one tenant, have it set the tenant query parameter
// (the handler then serves that tenant's records only) or refuse requests
// without it. Forgetting a record needs AllowForget, whose function names
// who asks for the audit line (from what the middleware authenticated).
//
// Routes, relative to where it is mounted (use http.StripPrefix):
//
//	GET  /records/{key}             one record by its hex key ID
//	GET  /lookup?tenant=&op=&part=  one record by the key a caller builds (idem.NewKey: parts in order)
//	GET  /records?op=&tenant=&status=&stuck=1&max_age=&min_age=&limit=&cursor=
//	GET  /stuck?op=&tenant=&limit=&cursor=   PROCESSING records past their lease
//	GET  /stats?op=&tenant=
//	POST /records/{key}/forget      {"token": "N", "status": "SUCCEEDED", "force": false, "reason": "..."}
//
// Errors are {"error": "..."} with 404 (no such record), 409 (a live
// lease, or the record changed since it was looked at), 400 (a bad
// request, a filter the store cannot apply), 403 (forget not allowed) or
// 503 (the store failed; its schema is missing).
package idemadmin

import (
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
	admin *idem.Admin
	who   func(*http.Request) string // AllowForget's; nil: forget is refused
	mux   *http.ServeMux
}

// Option configures a Handler.
type Option func(*handlerConfig)

type handlerConfig struct {
	who       func(*http.Request) string
	adminOpts []idem.AdminOption
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

// NewHandler returns a Handler over store, which must implement
// idem.AdminStore (an error wrapping errors.ErrUnsupported otherwise).
func NewHandler(store idem.Store, opts ...Option) (*Handler, error) {
	var c handlerConfig
	for _, o := range opts {
		o(&c)
	}
	as, ok := store.(idem.AdminStore)
	if !ok {
		return nil, fmt.Errorf("idemadmin: %T does not implement idem.AdminStore: %w", store, errors.ErrUnsupported)
	}
	a, err := idem.NewAdmin(as, c.adminOpts...)
	if err != nil {
		return nil, err
	}
	h := &Handler{admin: a, who: c.who, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /records/{key}", h.get)
	h.mux.HandleFunc("GET /lookup", h.lookup)
	h.mux.HandleFunc("GET /records", h.list)
	h.mux.HandleFunc("GET /stuck", h.stuck)
	h.mux.HandleFunc("GET /stats", h.stats)
	h.mux.HandleFunc("POST /records/{key}/forget", h.forget)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

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
	case errors.Is(err, idem.ErrLeaseLive), errors.Is(err, idem.ErrRecordChanged):
		return http.StatusConflict
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

func fail(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	k, err := idem.KeyFromHex(r.PathValue("key"))
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	h.answer(w, r, k)
}

func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	k, err := idem.NewKey(q.Get("tenant"), q.Get("op"), q["part"]...)
	if err != nil || q.Get("op") == "" {
		fail(w, http.StatusBadRequest, errors.Join(errors.New("idemadmin: lookup needs op and one part= per key part, in order (tenant= unless single-tenant)"), err))
		return
	}
	h.answer(w, r, k)
}

func (h *Handler) answer(w http.ResponseWriter, r *http.Request, k idem.Key) {
	e, err := h.admin.Lookup(r.Context(), k)
	if err != nil {
		fail(w, StatusOf(err), err)
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

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q, err := ListQuery(r)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	h.page(w, r, q)
}

func (h *Handler) stuck(w http.ResponseWriter, r *http.Request) {
	q, err := ListQuery(r)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	q.Stuck = true
	h.page(w, r, q)
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request, q idem.ListQuery) {
	p, err := h.admin.List(r.Context(), q)
	if err != nil {
		fail(w, StatusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, ViewPage(p))
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := idem.StatsQuery{Op: v.Get("op")}
	if v.Has("tenant") {
		q.Tenant, q.ByTenant = v.Get("tenant"), true
	}
	st, err := h.admin.Stats(r.Context(), q)
	if err != nil {
		fail(w, StatusOf(err), err)
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

func (h *Handler) forget(w http.ResponseWriter, r *http.Request) {
	if h.who == nil {
		fail(w, http.StatusForbidden, errors.New("idemadmin: forget is not allowed on this handler (idemadmin.AllowForget)"))
		return
	}
	who := h.who(r)
	if who == "" {
		fail(w, http.StatusForbidden, errors.New("idemadmin: forget: no operator named for this request"))
		return
	}
	k, err := idem.KeyFromHex(r.PathValue("key"))
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var b ForgetBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		fail(w, http.StatusBadRequest, errors.New("idemadmin: forget: body {\"token\": \"N\", \"status\": \"...\", \"force\": false, \"reason\": \"...\"}: "+err.Error()))
		return
	}
	st, ok := ParseStatus(b.Status)
	if !ok || st == 0 || b.Token == 0 {
		fail(w, http.StatusBadRequest, errors.New("idemadmin: forget: the token and status of the record looked at are required"))
		return
	}
	err = h.admin.Forget(r.Context(), idem.ForgetRequest{Key: k, Token: b.Token, Status: st, Force: b.Force, By: who, Reason: b.Reason})
	if err != nil {
		fail(w, StatusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"forgotten": k.Hex()})
}
