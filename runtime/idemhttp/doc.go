// Package idemhttp makes net/http handlers idempotent by the Idempotency-Key
// request header, and carries keys to downstream services.
//
// The server side, New, follows the IETF httpapi draft "The Idempotency-Key
// HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header-07), with
// Stripe's production choices where the draft is silent. It runs each keyed
// request through idem.Do on an idem.Executor, so a handler gets exactly the
// guarantees of an annotated method, on every store (memstore, pgstore,
// redisstore): the first request with a key claims it and runs the handler;
// its response is stored and replayed, byte for byte, to every retry with the
// same key, marked "Idempotent-Replayed: true".
//
//	ex := idem.NewExecutor(pgstore.New(pool), idem.SingleTenant())
//	mw := idemhttp.New(ex,
//		idemhttp.WithTenant(func(r *http.Request) string { return auth.Subject(r) }),
//	)
//	mux.HandleFunc("POST /orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
//		receipt, err := orders.Pay(r.Context(), r.PathValue("id"), amount) // a generated wrapper on ex
//		if err != nil && !idemhttp.WriteError(w, err) {
//			http.Error(w, "payment failed", http.StatusInternalServerError)
//		}
//		…
//	})
//	http.ListenAndServe(addr, mw(mux))
//
// The middleware puts the tenant it named into the handler's context
// (idem.ContextWithTenant), so the wrapper's record is scoped by the
// caller although its executor is SingleTenant: two tenants paying their
// own order 1 are two payments (see Example_tenantToWrapper).
//
// # What is stored
//
// The response the handler wrote: its status, the header fields of an
// allow-list (WithStoredHeaders; never Set-Cookie, Authorization or other
// credentials) and its body, encoded as the result of idem.Do by the
// executor's codec. A Policy decides which statuses are stored: by default
// 2xx, 3xx and 4xx except 408, 409, 425 and 429; a 5xx releases the key so
// that a retry runs the handler again, and so does a panic (under every
// policy), a response larger than WithMaxResponse, and a hijacked
// connection. StoreAll stores every response, as Stripe does.
//
// A replay is the representation the first request selected: when a retry
// would not have selected it (the stored Content-Encoding is not in its
// Accept-Encoding, or a field named by the response's Vary differs from the
// first request's), it gets 406 instead of bytes it cannot read.
//
// # Lost responses
//
// The point of the header is the retry of a request whose response was lost:
// the client timed out, or the connection broke, after the server did the
// work. So a client that goes away does not change the outcome. The handler
// runs with a context that is not cancelled with the client's
// (WithClientCancellation restores that), its writes do not fail when the
// client is gone, and its response is stored when it returns; the retry gets
// it. Only a failure of the handler itself releases the key.
//
// # Buffering and streaming
//
// The response is buffered until the handler returns and its outcome is
// stored (with a transactional store, committed): a client never sees a
// response whose effects were rolled back. A handler that flushes (through
// http.Flusher or http.ResponseController) streams instead: the status, the
// headers and everything written so far go out at once, and later writes
// pass through. A streamed response is still stored whole (when it fits
// within WithMaxResponse and the policy allows) and replayed in one piece;
// a response larger than WithMaxResponse is sent, marked
// "Idempotent-Not-Stored: too-large" (NotStoredHeader: a header field when
// the size was known before anything was sent, else a trailer), and not
// stored; its key is not released either (idem.NotStorable): every retry
// gets 500 response-not-replayable, never a second run. A handler that
// cannot tell what its request did (a proxy whose upstream broke after
// receiving it) calls OutcomeUnknown for the same treatment. If the outcome of a streamed response cannot be committed the
// connection is aborted, so that the client sees a broken response rather
// than a complete one. With pgstore in transactional mode the handler's
// request context carries the transaction (pgstore.TxFrom), so that its own
// writes commit with its stored response, or not at all.
// http.ResponseController keeps working through the middleware's
// ResponseWriter (it implements Unwrap); trailers and 1xx informational
// responses reach the client but are not stored.
//
// # Scope: tenant and operation
//
// Records are scoped by operation (by default the method and the route, see
// WithOperation) and by tenant. New requires the tenancy to be chosen:
// WithTenant names each request's client (the authenticated subject), so
// that a client that reuses, or guesses, another client's key never sees
// its response (a request whose tenant function returns "" is refused with
// 403, missing-tenant); SingleTenant says, in the code, that every client
// shares one key space per operation, which is right only when the clients
// trust each other. New panics when neither, or both, is given.
//
// Under WithTenant the handler's context carries the tenant
// (idem.TenantFromContext): every executor below the middleware scopes its
// records by it, a SingleTenant one included, and a WithTenant executor
// must name the same tenant (idem.ErrTenantConflict) or none. The
// middleware's own record key is the one it had before the tenant was put
// in the context (the tenant is one of its parts), so records stored by an
// earlier release stay reachable. A request whose context already names
// another tenant (a layer above the middleware) is refused with 403,
// tenant-conflict.
//
// # Which layer decided
//
// WriteError answers a wrapped method's refusal in the middleware's format,
// naming the layer that decided: a business key reused with another payload
// is 422 business-key-reused, a business key held by another request 409
// business-key-in-progress with the holder's lease as Retry-After, never
// the Idempotency-Key's key-reused or request-in-progress. A response whose
// wrapped methods were answered with outcomes stored earlier under their
// business keys carries "Idempotent-Replayed-By: business-key"
// (ReplayedByHeader).
//
// # Clients that send no key
//
// WithDerivedKey, off by default, is a fallback for clients that cannot be
// changed to send a key: a request without one gets a key derived from its
// tenant, operation, method, path, query, media type and canonical body,
// deduplicated within a short window (at most MaxDerivedKeyWindow), and
// every response to it says so (DerivedKeyHeader). Two legitimate
// identical requests inside the window get one answer: use it only where
// that is the lesser risk.
//
// # Client side
//
// Transport sets Idempotency-Key on outgoing POST and PATCH requests: the key
// in the context (ContextWithOutgoingKey), a key derived from the idempotent
// call the request is made from (idem.KeyFrom and idem.Derive), or a fresh
// UUIDv7 (GenerateKey), generated once per logical request and kept across
// its retries.
package idemhttp
