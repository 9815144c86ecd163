package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Errors the middleware gives the executor as the reason to release a key;
// the executor's observer sees them in idem.EventReleased.
var (
	// ErrNotStored: the policy declined the response's status.
	ErrNotStored = errors.New("idemhttp: response status not stored by policy")
	// ErrResponseTooLarge: the response body exceeded the storage limit.
	// The handler ran and its response was sent; the key is kept decided
	// (idem.NotStorable): retries get 500 response-not-replayable, never a
	// second run.
	ErrResponseTooLarge = errors.New("idemhttp: response larger than the storage limit")
	// ErrOutcomeUnknown: the handler said (OutcomeUnknown) that the
	// request may have had its effects and its response does not say what
	// they were. The key is kept decided, as for ErrResponseTooLarge.
	ErrOutcomeUnknown = errors.New("idemhttp: the request may have had its effects, and its outcome is unknown")
	// ErrHijacked: the handler took the connection over.
	ErrHijacked = errors.New("idemhttp: connection hijacked by the handler")
	// ErrNoResponse: the client went away and the handler returned without
	// writing a response (WithClientCancellation only).
	ErrNoResponse = errors.New("idemhttp: handler wrote no response after its context ended")
)

// response is what is stored for a request: the result value of idem.Do,
// encoded by the executor's codec.
type response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Selected holds the first request's values of the request header
	// fields that selected this representation: those named by the
	// response's Vary, and Accept-Encoding when the response has a
	// Content-Encoding. A field the request lacked is present with no
	// values. A replay is refused (406) to a retry that would not have
	// selected it (see notAcceptable). Records stored before this field
	// existed have none, and are replayed unchecked.
	Selected http.Header `json:"selected,omitempty"`
}

// New returns middleware that makes the wrapped handler idempotent by the
// Idempotency-Key request header, on ex's store.
//
// For a request whose method it applies to (POST and PATCH by default), it
// reads the key and the body, claims the key scoped by tenant and
// operation through idem.Do, runs the handler, stores its response as the
// policy says, and replays the stored response, byte for byte and with
// "Idempotent-Replayed: true", to every retry with the same key and the
// same request. The errors, as RFC 9457 problem details:
//
//   - 400: the key is missing (unless WithOptionalKey or WithDerivedKey)
//     or malformed;
//   - 403: the WithTenant function named no tenant for the request;
//   - 409 with Retry-After: the first request with the key is still running
//     (or, WithWait, the stored response once it finishes);
//   - 406: the stored response is in a representation the retry does not
//     accept (its Accept-Encoding, or a field named by the response's Vary,
//     differs from the first request's);
//   - 413: the request body exceeds WithMaxBody;
//   - 414 or 400: the operation or the tenant is too long to be recorded;
//   - 422: the key was used with another request (see WithFingerprint);
//   - 500: the request was processed, but its response cannot be replayed;
//   - 429 with Retry-After: the tenant holds its whole share of the store
//     (an *idem.TenantQuotaError; other tenants are served);
//   - 503 with Retry-After: the store could not be reached, or is full.
//
// The guarantees are the executor's: exactly one handler run per key while
// its outcome is stored, a lease that lapses if the process dies, and
// release of the key on a 5xx or a panic so that a retry runs again.
//
// Exactly one of WithTenant and SingleTenant is required: the tenancy is
// a security decision, written where the middleware is built. New panics
// if it is missing, if ex is nil or if an option is invalid, with a
// message naming the rule or the option, as idem.NewExecutor does: such a
// mistake is in the program, not in a request.
func New(ex *idem.Executor, opts ...Option) func(http.Handler) http.Handler {
	if ex == nil {
		panic("idemhttp: New: the executor is nil")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			cfg.invalid("New: a nil Option")
			continue
		}
		o(&cfg)
	}
	cfg.validate()
	if cfg.bad != "" {
		panic(cfg.bad)
	}
	return func(next http.Handler) http.Handler {
		m := &middleware{cfg: cfg, ex: ex, next: next}
		if mux, ok := next.(*http.ServeMux); ok {
			m.mux = mux
		}
		return m
	}
}

type middleware struct {
	cfg  config
	ex   *idem.Executor
	next http.Handler
	mux  *http.ServeMux
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.cfg.methods[r.Method] {
		m.passThrough(w, r)
		return
	}
	ev := Event{Request: r}
	vals := r.Header.Values(Header)
	switch {
	case len(vals) == 0 && m.cfg.window > 0: // WithDerivedKey
		ev.Derived = true
		w.Header().Set(DerivedKeyHeader, "true")
		vals = []string{"derived"} // ParseKey accepts it; the key is derived below
	case len(vals) == 0:
		ev.Kind = EventKeyMissing
		if m.cfg.optional {
			m.cfg.observe(ev)
			m.passThrough(w, r)
			return
		}
		ev.Status = http.StatusBadRequest
		m.cfg.observe(ev)
		m.problem(w, http.StatusBadRequest, "missing-key", "Idempotency-Key is missing",
			"This operation is idempotent and requires an Idempotency-Key request header: a unique key per logical request, sent again unchanged on every retry of it.")
		return
	case len(vals) > 1:
		ev.Kind, ev.Status = EventKeyInvalid, http.StatusBadRequest
		m.cfg.observe(ev)
		m.problem(w, http.StatusBadRequest, "invalid-key", "Idempotency-Key is invalid",
			"The request has more than one Idempotency-Key header field; send exactly one.")
		return
	}
	key, err := ParseKey(vals[0])
	if err != nil {
		ev.Kind, ev.Status, ev.Err = EventKeyInvalid, http.StatusBadRequest, err
		m.cfg.observe(ev)
		m.problem(w, http.StatusBadRequest, "invalid-key", "Idempotency-Key is invalid",
			"An Idempotency-Key is 1 to 255 printable ASCII characters, bare or as a structured-field string: "+
				strings.TrimPrefix(err.Error(), "idemhttp: ")+".")
		return
	}
	if !ev.Derived {
		ev.Key = key
	}

	body, err := m.readBody(r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			ev.Kind, ev.Status, ev.Err = EventBodyTooLarge, http.StatusRequestEntityTooLarge, err
			m.cfg.observe(ev)
			m.problem(w, http.StatusRequestEntityTooLarge, "request-too-large", "Request body too large",
				"The body of a request with an Idempotency-Key may be at most "+strconv.FormatInt(m.cfg.maxBody, 10)+" bytes.")
			return
		}
		// The client's body could not be read (it went away, or sent a
		// malformed chunked body): nothing was claimed.
		ev.Kind, ev.Status, ev.Err = EventBodyUnreadable, http.StatusBadRequest, err
		m.cfg.observe(ev)
		m.problem(w, http.StatusBadRequest, "unreadable-body", "Request body could not be read", err.Error()+".")
		return
	}

	if m.cfg.tenant != nil {
		if ev.Tenant = m.cfg.tenant(r); ev.Tenant == "" {
			ev.Kind, ev.Status = EventTenantMissing, http.StatusForbidden
			m.cfg.observe(ev)
			m.problem(w, http.StatusForbidden, "missing-tenant", "Request has no tenant",
				"This operation scopes Idempotency-Keys by client, and this request names none (it is not authenticated); nothing was processed. Authenticate, and retry with the same Idempotency-Key.")
			return
		}
	}
	var fromPath bool
	ev.Op, fromPath = m.operation(r)
	if len(ev.Op) > idem.MaxOpLen || len(ev.Tenant) > idem.MaxTenantLen {
		// A longer scope can never be recorded: answer it for what it is,
		// not as a store failure to retry.
		status, what := http.StatusBadRequest, "tenant"
		if len(ev.Op) > idem.MaxOpLen {
			what = "operation"
			if fromPath {
				status, what = http.StatusRequestURITooLong, "operation (its method and path)"
			}
		}
		ev.Kind, ev.Status = EventScopeTooLong, status
		m.cfg.observe(ev)
		m.problem(w, status, "scope-too-long", "Request scope too long to record",
			"The request's "+what+" is longer than the idempotency store records ("+
				strconv.Itoa(idem.MaxOpLen)+" bytes for the method and path or route, "+
				strconv.Itoa(idem.MaxTenantLen)+" for the tenant); nothing was processed.")
		return
	}

	var h idem.Hasher
	if ev.Derived {
		derivedFingerprint(r, body, &h, m.cfg.tenant == nil)
	} else {
		err = m.cfg.fingerprint(r, body, &h)
	}
	if err == nil && m.cfg.customFP {
		_, err = h.Sum() // a value the hasher cannot encode (DefaultFingerprint adds none)
	}
	if err != nil {
		ev.Kind, ev.Status, ev.Err = EventInvalidRequest, http.StatusBadRequest, err
		m.cfg.observe(ev)
		m.problem(w, http.StatusBadRequest, "invalid-request", "Request cannot be fingerprinted", err.Error()+".")
		return
	}
	ctx := r.Context()
	if !m.cfg.cancel && cancellable(ctx) {
		ctx = context.WithoutCancel(ctx)
	}
	claimCtx, named, conflict := m.claimContext(ctx, ev.Tenant)
	if conflict != "" {
		ev.Kind, ev.Status = EventTenantMissing, http.StatusForbidden
		ev.Err = fmt.Errorf("%w: %s", idem.ErrTenantConflict, conflict)
		m.cfg.observe(ev)
		m.write(w, tenantConflict)
		return
	}
	var parts idem.KeyParts
	if ev.Tenant != "" && !named {
		// The key's tenant when the executor names none (SingleTenant): the
		// store scopes and counts the record by it.
		parts.Tenant(ev.Tenant)
	}
	method := idem.Method{Op: ev.Op, TTL: m.cfg.ttl, Lease: m.cfg.lease, Wait: m.cfg.wait}
	if ev.Derived {
		sum, _ := h.Sum() // derivedFingerprint adds nothing Sum can fail on
		parts.Bytes(derivedPart, sum[:])
		method.TTL = m.cfg.window
	} else {
		parts.String(Header, key)
	}

	var rec *recorder
	var aborted bool
	resp, err := idem.Do(claimCtx, m.ex, &method, &parts, &h, func(ctx context.Context) (_ response, err error) {
		rec = newRecorder(w, m.cfg.maxResponse)
		if ev.Tenant != "" {
			// One tenant from the door to the record: every executor the
			// handler's wrapped methods run on scopes them by this one
			// (idem.ContextWithTenant).
			if t, ok := idem.TenantFromContext(ctx); !ok || t != ev.Tenant {
				ctx = idem.ContextWithTenant(ctx, ev.Tenant)
			}
		}
		var cell idem.Decisions // what the wrapped methods the handler calls decide (layers.go)
		r2 := r.WithContext(idem.WithDecisions(ctx, &cell))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		defer func() {
			// A handler that said its outcome is unknown (OutcomeUnknown)
			// and then aborted its response (a proxy whose upstream broke
			// mid-body: http.ErrAbortHandler) keeps the key decided; the
			// client's response is aborted after the outcome is settled.
			if rec.unknown && !rec.hijacked {
				if p := recover(); p != nil {
					if p != http.ErrAbortHandler {
						panic(p)
					}
					aborted, err = true, idem.NotStorable(ErrOutcomeUnknown)
				}
			}
		}()
		m.next.ServeHTTP(rec, r2)
		return m.settle(ctx, rec, r2, &cell)
	})
	if aborted {
		ev.Kind, ev.Status, ev.Err = EventOutcomeUnknown, rec.status, err
		m.cfg.observe(ev)
		panic(http.ErrAbortHandler)
	}
	if rec != nil {
		m.afterRun(w, rec, err, &ev)
		return
	}
	if err == nil {
		if field, ok := notAcceptable(resp, r.Header); ok {
			ev.Kind, ev.Status = EventNotAcceptable, http.StatusNotAcceptable
			m.cfg.observe(ev)
			m.problem(w, http.StatusNotAcceptable, "replay-not-acceptable", "Stored response not acceptable to this request",
				"The response stored for this Idempotency-Key was selected by the first request's "+field+
					" header field, and this request's "+field+" would not have selected it; retry with the first request's "+field+".")
			return
		}
		ev.Kind, ev.Status = EventReplayed, resp.Status
		m.cfg.observe(ev)
		replay(w, resp)
		return
	}
	m.refused(w, err, &ev)
}

// cancellable reports whether ctx can end: it has a Done channel or a
// deadline. One that cannot (a fasthttp door's context.Background) is
// the claim's and the handler's context as it is: context.WithoutCancel
// would change nothing but add a wrapper whose every Value lookup
// allocates (the runtime makes three per call).
func cancellable(ctx context.Context) bool {
	if ctx.Done() != nil {
		return true
	}
	_, ok := ctx.Deadline()
	return ok
}

// passThrough runs the handler for a request the middleware does not
// protect (a method it does not apply to, or WithOptionalKey and no key),
// on the ResponseWriter it was given. Under WithTenant the handler's
// context names the request's tenant all the same, so that the wrapped
// methods it calls are scoped by it: "" when the tenant function names
// none, which they refuse (idem.ErrMissingTenant) rather than share one
// key space. A tenant a layer above already put in the context stays.
func (m *middleware) passThrough(w http.ResponseWriter, r *http.Request) {
	if m.cfg.tenant != nil {
		if _, named := idem.TenantFromContext(r.Context()); !named {
			r = r.WithContext(idem.ContextWithTenant(r.Context(), m.cfg.tenant(r)))
		}
	}
	m.next.ServeHTTP(w, r)
}

// readBody reads the request body whole, up to the limit: into one slice
// of the declared length when there is one (a server's body ends there),
// else through a buffer. A Body set by hand that is shorter or longer than
// its ContentLength is read to its end all the same.
func (m *middleware) readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	defer r.Body.Close()
	cl := r.ContentLength
	if cl > m.cfg.maxBody {
		return nil, &http.MaxBytesError{Limit: m.cfg.maxBody}
	}
	if cl <= 0 {
		return m.readRest(r.Body, nil)
	}
	body := make([]byte, cl, cl+1) // one spare byte to find the end in
	if n, err := io.ReadFull(r.Body, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return body[:n], nil // shorter than declared: only a Body set by hand can be
		}
		return nil, err
	}
	switch n, err := io.ReadFull(r.Body, body[cl:cl+1]); {
	case n == 0 && errors.Is(err, io.EOF):
		return body, nil
	case n == 0:
		return nil, err
	}
	// Longer than declared: only a Body set by hand can be.
	return m.readRest(r.Body, body[:cl+1])
}

// readRest reads body to its end after the bytes already read, refusing
// more than the limit in all.
func (m *middleware) readRest(body io.Reader, read []byte) ([]byte, error) {
	buf := bytes.NewBuffer(read)
	if _, err := buf.ReadFrom(io.LimitReader(body, m.cfg.maxBody-int64(len(read))+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > m.cfg.maxBody {
		return nil, &http.MaxBytesError{Limit: m.cfg.maxBody}
	}
	return buf.Bytes(), nil
}

// operation names the request's operation: the configured function, or the
// method and the route, or the method and the path in its canonical escaped
// form (fromPath is then true). The escaped form is printable ASCII, so an
// operation never carries the NUL or invalid UTF-8 a path may decode to,
// and it is a function of the decoded path: /a%41 and /aA are one path.
func (m *middleware) operation(r *http.Request) (op string, fromPath bool) {
	if m.cfg.op != nil {
		return m.cfg.op(r), false
	}
	pattern := r.Pattern
	if pattern == "" && m.mux != nil {
		_, pattern = m.mux.Handler(r)
	}
	if pattern == "" {
		return r.Method + " " + (&url.URL{Path: r.URL.Path}).EscapedPath(), true
	}
	if strings.HasPrefix(pattern, r.Method+" ") {
		return pattern, false
	}
	return r.Method + " " + pattern, false
}

// claimContext returns the context of the middleware's own claim, given
// the tenant its WithTenant function named ("" under SingleTenant), and
// whether that context names the tenant (the key then has no tenant part:
// the executor scopes it by the context's).
//
// The claim's key is what it was before doors put their tenant in the
// context, so that the records a running release stored stay reachable
// across the deploy: under a single-tenant executor, or one whose
// WithTenant function names the tenant, the door's tenant is the first of
// the key's parts (KeyParts.Tenant) and the context is the request's. Only
// when the executor would otherwise name none (a WithTenant function
// returning "", which idem.Do now refuses with ErrMissingTenant) does the
// claim's context carry the door's tenant, with no tenant part: the key is
// then the one the part made before (the part became the key's tenant).
// The handler's context always carries the door's tenant (see ServeHTTP).
//
// conflict is not empty when a layer above the middleware already put
// another tenant in the request's context: two layers read two callers,
// and the request is refused.
func (m *middleware) claimContext(ctx context.Context, tenant string) (claim context.Context, named bool, conflict string) {
	if tenant == "" {
		return ctx, false, ""
	}
	if up, ok := idem.TenantFromContext(ctx); ok {
		if up != tenant {
			return ctx, false, fmt.Sprintf("the request's context names %.64q, the middleware's WithTenant function %.64q", up, tenant)
		}
		return ctx, true, ""
	}
	if !m.ex.IsSingleTenant() && m.ex.Tenant(ctx) == "" {
		return idem.ContextWithTenant(ctx, tenant), true, ""
	}
	return ctx, false, ""
}

// settle decides, once the handler returned, whether its response is the
// stored outcome (nil error) or the key is released (an error). cell holds
// what the wrapped methods the handler called decided (see stores); when
// they were answered with stored outcomes, the response says so
// (ReplayedByHeader), and its stored copy too.
func (m *middleware) settle(ctx context.Context, rec *recorder, r *http.Request, cell *idem.Decisions) (response, error) {
	if rec.hijacked {
		return response{}, ErrHijacked
	}
	wrote := rec.status != 0
	rec.finish()
	if !wrote && m.cfg.cancel && ctx.Err() != nil {
		return response{}, fmt.Errorf("%w: %w", ErrNoResponse, context.Cause(ctx))
	}
	if rec.overflow {
		return response{}, idem.NotStorable(ErrResponseTooLarge)
	}
	if rec.unknown {
		return response{}, idem.NotStorable(ErrOutcomeUnknown)
	}
	// The body is the recorder's buffer, not a copy: nothing writes to it
	// once the handler returned, and the response is encoded before
	// anything else happens to it.
	resp := response{Status: rec.status, Body: rec.body.Bytes()}
	for k, v := range rec.snapshot {
		if m.cfg.stored[k] {
			if resp.Header == nil {
				resp.Header = make(http.Header, 4)
			}
			resp.Header[k] = v
		}
	}
	if cell.Replayed() && !rec.streaming {
		rec.snapshot[ReplayedByHeader] = []string{ReplayedByBusinessKey}
		if resp.Header == nil {
			resp.Header = make(http.Header, 1)
		}
		resp.Header[ReplayedByHeader] = []string{ReplayedByBusinessKey}
	}
	resp.Selected = selectedBy(rec.snapshot, r.Header)
	if err := m.stores(rec.status, cell.Verdict()); err != nil {
		return resp, err
	}
	return resp, nil
}

// stores applies the one rule of what a retry sees (docs/LAYERS.md): when
// the handler called wrapped methods (idem.Do) and one of them released
// its key (a transient error, a refusal), the response is not stored,
// whatever its status, so that the retry runs them again; when they
// stored or replayed their outcomes (a success, a final error), the
// response is stored whatever status the handler mapped them to, except a
// 5xx that the policy does not store (a 5xx says the handler failed after
// them); when none ran, the policy decides.
func (m *middleware) stores(status int, verdict idem.Decision) error {
	switch verdict {
	case idem.Released:
		return fmt.Errorf("%w: %d (a wrapped method released its key)", ErrNotStored, status)
	case idem.Stored:
		if status < 500 || m.cfg.policy(status) {
			return nil
		}
	}
	if !m.cfg.policy(status) {
		return fmt.Errorf("%w: %d", ErrNotStored, status)
	}
	return nil
}

// afterRun sends the handler's response once its outcome is settled.
func (m *middleware) afterRun(w http.ResponseWriter, rec *recorder, err error, ev *Event) {
	ev.Status = rec.status
	switch {
	case err == nil:
	case errors.Is(err, ErrHijacked):
		ev.Kind = EventHijacked
		m.cfg.observe(*ev)
		return
	case errors.Is(err, ErrResponseTooLarge):
		ev.Kind, ev.Err = EventResponseTooLarge, err
		m.cfg.observe(*ev)
		rec.notStored("too-large")
	case errors.Is(err, ErrOutcomeUnknown):
		ev.Kind, ev.Err = EventOutcomeUnknown, err
		m.cfg.observe(*ev)
		rec.notStored("outcome-unknown")
	case errors.Is(err, ErrNotStored):
		ev.Kind, ev.Err = EventNotStored, err
		m.cfg.observe(*ev)
	case errors.Is(err, ErrNoResponse):
		// The client is gone and there is nothing to say.
		return
	case errors.Is(err, idem.ErrLeaseLost), errors.Is(err, idem.ErrOutcomePending):
		// The handler ran and had its effects, but its lease was taken over
		// (it ran longer than the lease), or its outcome is still being
		// stored through a store outage (lease mode): its response is the
		// truth for this client. The executor's observer reported it.
		ev.Kind, ev.Err = EventStoreError, err
		m.cfg.observe(*ev)
	default:
		// The outcome could not be committed: with a transactional store
		// the handler's writes were rolled back, so its response must not
		// reach the client as if they had happened.
		ev.Kind, ev.Err = EventStoreError, err
		m.cfg.observe(*ev)
		if rec.streaming {
			panic(http.ErrAbortHandler) // cut the stream short rather than end it cleanly
		}
		w.Header().Set("Retry-After", "1")
		m.problem(w, http.StatusServiceUnavailable, "store-unavailable", "Idempotency store unavailable",
			"The response could not be stored, and the request's effects were not committed; retry with the same Idempotency-Key.")
		return
	}
	rec.send()
}

// OutcomeUnknown tells the middleware serving w that the request may have
// had its effects but the response the handler writes does not say what
// they were: a proxy whose upstream received the request and then broke
// the connection or did not answer in time. The middleware then neither
// stores that response nor releases the key: the key is kept decided
// (idem.NotStorable), the response goes to the client with
// "Idempotent-Not-Stored: outcome-unknown" (NotStoredHeader), the observer
// is told (EventOutcomeUnknown), and every retry with the key gets 500
// response-not-replayable instead of a second run, until the key expires.
// It reports whether w is (or wraps, through Unwrap) the middleware's
// writer; it does nothing otherwise (no middleware above the handler, a
// method it does not apply to, or WithOptionalKey letting a request
// without a key through).
func OutcomeUnknown(w http.ResponseWriter) bool {
	for {
		switch x := w.(type) {
		case *recorder:
			x.unknown = true
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return false
		}
	}
}

// refused answers a request that did not run the handler and has nothing
// to replay.
func (m *middleware) refused(w http.ResponseWriter, err error, ev *Event) {
	if p, ok := problemOf(err, m.cfg.maxRetry, byIdempotencyKey); ok {
		ev.Kind, ev.Status = p.kind, p.status
		if p.kind != EventConflict && p.kind != EventInProgress {
			ev.Err = err
		}
		m.cfg.observe(*ev)
		m.write(w, p)
		return
	}
	if ev.Request.Context().Err() != nil && errors.Is(err, ev.Request.Context().Err()) {
		// The client went away while its request waited or claimed
		// (WithClientCancellation): its own doing, not the store's, and
		// there is no one to answer.
		ev.Kind, ev.Err = EventClientGone, err
		m.cfg.observe(*ev)
		return
	}
	// A store error; a replayed final error other than the ones above
	// cannot happen (the middleware stores none).
	ev.Kind, ev.Status, ev.Err = EventStoreError, http.StatusServiceUnavailable, err
	m.cfg.observe(*ev)
	m.write(w, storeUnavailable)
}

// storeFullRetryAfter is the Retry-After of a 503 store-full: longer than a
// store outage's, as a full store frees room only as records expire or
// calls end.
const storeFullRetryAfter = 2 * time.Second

// retryAfter formats d as delay-seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
}

// replay writes a stored response.
func replay(w http.ResponseWriter, resp response) {
	h := w.Header()
	maps.Copy(h, resp.Header) // the decoded values are the replay's own
	vals := make([]string, 2) // one allocation for the two fields set here
	vals[0] = "true"
	h[ReplayedHeader] = vals[0:1:1]
	if bodyAllowed(resp.Status) {
		vals[1] = strconv.Itoa(len(resp.Body))
		h["Content-Length"] = vals[1:2:2]
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && bodyAllowed(resp.Status) {
		_, _ = w.Write(resp.Body)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
