package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Do runs fn at most once per key: it claims the key built from parts
// (scoped by the executor's tenant and m.Op), runs fn, stores the outcome
// and returns what fn returned. A retry with the same key and fingerprint
// gets the stored outcome instead of a second run.
//
// A final error (Final, or a sentinel in m.Final) is stored and replayed as
// a *ReplayedError; any other error of fn, a panic (re-raised),
// runtime.Goexit or a cancelled context releases the key, so that a retry
// runs fn again. Once fn has run, nothing else releases it.
//
// Errors to test with errors.Is: ErrInProgress (a duplicate while the first
// call runs; with m.Wait, Do waits for the outcome instead), ErrOutcomePending
// (the caller's context ended while the outcome was still being stored),
// ErrPayloadMismatch (the key reused with another payload), ErrLeaseLost,
// ErrOutcomeNotStored (a replay of an outcome that could not be stored),
// ErrUndecodable, ErrStoreUnavailable (the store could not be used before fn
// ran), ErrMisconfigured and ErrTooLarge (m or the names are invalid; nothing
// is claimed), and the context's error when it ends while Do claims or waits.
//
// The package documentation states the guarantees in full: see the sections
// Outcomes that cannot be stored, Store outages, Lost replies, Deploys and
// Transactional mode. Generated wrappers call Do; it is exported for
// hand-written callers too.
func Do[T any](ctx context.Context, ex *Executor, m *Method, parts *KeyParts, h *Hasher, fn func(context.Context) (T, error)) (T, error) {
	// What the call reads from ctx, in one walk of its chain (doorctx.go):
	// a context that carries none of it costs that walk alone.
	want := fTenant | fDecisions | fInfo
	if ex.txStore != nil {
		want |= fTxn
	}
	s := lookup(ctx, want)
	if s.decisions != nil { // an edge layer's cell (layers.go)
		return doRecorded(ctx, &s, ex, m, parts, h, fn)
	}
	if ex.hook != nil { // WithCallHook (hook.go)
		return hooked(ctx, ex, m, parts, h, fn)
	}
	return do(ctx, &s, ex, m, parts, h, fn, nil)
}

// do is Do, with s the state read from ctx (lookup); on, when set, is the
// call's CallObserver (hook.go).
func do[T any](ctx context.Context, s *callState, ex *Executor, m *Method, parts *KeyParts, h *Hasher, fn func(context.Context) (T, error), on CallObserver) (T, error) {
	var zero T
	var start time.Time
	if ex.observe != nil || on != nil {
		start = ex.now()
	}
	renew, err := ex.check(m)
	if err != nil {
		return zero, err
	}
	shape, err := ex.prepare(m, reflect.TypeFor[T]())
	if err != nil {
		return zero, err
	}
	tenant, err := ex.callTenant(ctx, s)
	if err != nil {
		return zero, fmt.Errorf("idem: %.64q: %w", m.Op, err)
	}
	if len(tenant) > MaxTenantLen {
		return zero, fmt.Errorf("idem: %.64q: tenant of %d bytes: %w (idem.MaxTenantLen is %d)", m.Op, len(tenant), ErrTooLarge, MaxTenantLen)
	}
	key, err := parts.id(tenant, m.Op)
	if err != nil {
		return zero, err
	}
	if !ex.local || ex.observe != nil || on != nil {
		// Someone may read the key's text: the store (a LocalStore keeps
		// none) or the observers. Otherwise it is built only for an
		// InProgressError (see below).
		key.Text = parts.text()
	}
	fp, err := h.Sum()
	if err != nil {
		return zero, err
	}
	lease := m.Lease
	if lease == 0 {
		lease = ex.lease
	}
	if renew {
		if dl, ok := ctx.Deadline(); ok {
			lease = max(lease, dl.Sub(ex.now())+ex.timeout)
		}
	}
	lease = min(lease, m.TTL)
	req := ClaimRequest{Key: key, Fingerprint: fp, Token: ex.token(), Lease: lease, TTL: m.TTL, Scheme: m.Scheme}
	c := call[T]{ex: ex, m: m, key: key, fp: fp, start: start, on: on, info: s.info, lease: lease, shape: shape}
	if c.info != nil {
		c.info.replayed.Store(false) // this call's answer, not an earlier one's
	}

	if ex.txStore != nil {
		claim, txn, err := claimTx(ctx, s.txn, ex.txStore, req, m.Wait)
		if err != nil {
			return zero, c.claimError(ctx, "claim", err)
		}
		if !claim.Claimed {
			c.inProgressText(claim.Record, parts)
			v, _, err := c.answer(claim.Record, false)
			return v, err
		}
		return runTx(ctx, &c, claim, txn, fn)
	}

	var waited *waiter
	adopted := false
	for {
		claim, err := c.claim(ctx, &req)
		if err != nil {
			if !refused(err) {
				c.abandon(ctx, req.Token, req.Lease)
			}
			return zero, c.claimError(ctx, "claim", err)
		}
		rec := claim.Record
		if !claim.Claimed && rec.Status == StatusProcessing && rec.Token == req.Token {
			// The caller's own claim, applied by an attempt whose reply was
			// lost, answered by a store that does not recognise its token.
			claim = Claim{Claimed: true}
		}
		if claim.Claimed {
			// The claim can be live until a lease after its reply, at the
			// latest (the store started the lease when it applied it).
			c.until = ex.instant().Add(lease)
			return run(ctx, &c, claim, req.Token, lease, renew, fn)
		}
		if !adopted && rec.Status == StatusProcessing && rec.LeaseLeft <= 0 && rec.Fingerprint != req.Fingerprint && c.schemeChanged(rec) {
			// A lapsed claim made before a deploy: take it over as the
			// same payload, under the record's own fingerprint.
			adopted = true
			c.emit(EventSchemeChanged, nil)
			req.Fingerprint, req.Scheme, c.fp = rec.Fingerprint, rec.Scheme, rec.Fingerprint
			continue
		}
		if m.Wait > 0 && waited == nil {
			waited = &waiter{deadline: ex.now().Add(m.Wait), clock: ex.clock}
		}
		c.inProgressText(rec, parts)
		v, again, err := c.answer(rec, waited.more())
		if !again {
			return v, err
		}
		c.waiting(waited.deadline.Sub(ex.now())) // CallObserver.Wait (hook.go)
		if err := waited.sleep(ctx, rec.LeaseLeft); err != nil {
			return zero, c.claimError(ctx, "waiting for", err)
		}
	}
}

// check validates m, and reports whether its calls renew their lease.
func (ex *Executor) check(m *Method) (renew bool, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %.64q: %s", ErrMisconfigured, m.Op, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Stale != nil:
		return false, m.Stale
	case m.TTL <= 0:
		return false, bad("TTL %v must be > 0", m.TTL)
	case m.Lease < 0:
		return false, bad("Lease %v must be >= 0 (0 takes the executor's lease)", m.Lease)
	case m.Lease > m.TTL:
		return false, bad("Lease %v exceeds TTL %v", m.Lease, m.TTL)
	case m.Wait < 0:
		return false, bad("Wait %v must be >= 0", m.Wait)
	case len(m.Op) > MaxOpLen:
		return false, fmt.Errorf("idem: %.64q: operation name of %d bytes: %w (idem.MaxOpLen is %d)", m.Op, len(m.Op), ErrTooLarge, MaxOpLen)
	}
	switch {
	case ex.txStore != nil:
		return false, nil // the transaction holds the claim: nothing to renew
	case m.Renew && ex.renewer == nil:
		return false, bad("Renew needs a store that renews leases, and %T does not implement idem.Renewer", ex.store)
	}
	return ex.renew || m.Renew, nil
}

// checkOp refuses m when the executor has run another method (another
// non-empty Func) under m.Op: their records would answer each other. The
// first Method seen under an op is kept; later calls with the same
// descriptor cost one map load and a pointer comparison, and none once
// prepare kept the answer in m.
func (ex *Executor) checkOp(m *Method) error {
	v, ok := ex.ops.Load(m.Op)
	if !ok {
		v, _ = ex.ops.LoadOrStore(m.Op, m)
	}
	first := v.(*Method)
	if first == m || first.Func == m.Func {
		return nil
	}
	return fmt.Errorf("%w %q: used by two methods, %s and %s: each would be answered with the other's stored outcomes; "+
		"give one of them another operation name (op=... in its //idem: annotation)", ErrMisconfigured, m.Op, first.Func, m.Func)
}

// refused reports whether a store refused a claim outright, writing
// nothing: a retry would be refused the same way.
func refused(err error) bool {
	return errors.Is(err, ErrStoreFull) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrStoreSchema)
}

// call carries what one Do needs across its helpers.
type call[T any] struct {
	ex    *Executor
	m     *Method
	key   Key // its Text may be empty (see do) until an InProgressError needs it
	fp    Fingerprint
	start time.Time
	on    CallObserver // WithCallHook's observer of this call, or nil
	info  *CallInfo    // WithCallInfo's, or nil
	// lease is the lease of the call's claim.
	lease time.Duration
	// until is when, at the latest, the call's claim stops being live
	// (lease mode): a lease after the reply of its claim or of its last
	// renewal, by the executor's clock.
	until time.Time
	// bare is the caller's context without its cancellation, made with
	// the method's context (run), or nil: see detached.
	bare context.Context
	// shape is the Meta naming T's shape (resultMeta, via prepare).
	shape []byte
}

// detached returns the context of a store call made with ctx, the
// caller's, after the method ran: the executor's (Executor.detached), or,
// on a LocalStore, c.bare, which is the same context made in the method
// context's allocation.
func (c *call[T]) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.bare != nil && c.ex.local {
		return c.bare, nop
	}
	return c.ex.detached(ctx)
}

func (c *call[T]) emit(kind EventKind, err error) {
	if c.ex.observe == nil && c.on == nil {
		return
	}
	ev := Event{Kind: kind, Key: c.key, Elapsed: c.ex.now().Sub(c.start), Err: err}
	if c.ex.observe != nil {
		c.ex.observe(ev)
	}
	if c.on != nil {
		c.on.Event(ev)
	}
}

func (c *call[T]) storeError(what string, err error) error {
	err = &storeError{key: c.key, call: what, err: err}
	c.emit(EventStoreError, err)
	return err
}

// claimError reports a claim (or a wait) that failed: the caller's doing
// when its context is done (EventCanceled, the error wraps the context's),
// the store's otherwise (the error wraps ErrStoreUnavailable, unless the
// store refused the caller's own input with ErrTooLarge).
func (c *call[T]) claimError(ctx context.Context, what string, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		serr := &storeError{key: c.key, call: what, before: !errors.Is(err, ErrTooLarge), err: err}
		c.emit(EventStoreError, serr)
		return serr
	}
	if !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	err = &storeError{key: c.key, call: what, err: err}
	c.emit(EventCanceled, err)
	return err
}

// claim asks the store for the key, retrying a failure with the same token
// (a lost reply may hide a claim the store applied; repeating it is the same
// claim), within the executor's attempts and the caller's context.
func (c *call[T]) claim(ctx context.Context, req *ClaimRequest) (Claim, error) {
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		claim, err := c.ex.store.Claim(ctx, *req)
		if err == nil || attempt >= c.ex.attempts || ctx.Err() != nil || refused(err) {
			return claim, err
		}
		c.emit(EventStoreRetry, err)
		if c.ex.clock.Sleep(ctx, backoff) != nil {
			return claim, err
		}
		backoff *= 4
	}
}

// abandon releases, best effort, the claim a failed Claim of token may have
// made (its reply lost), so that it does not block the key for the lease.
// A store answers nil when there is no such claim, and ErrLeaseLost when
// another token holds the key: neither is news.
//
// A store in an outage (see outage) is asked again in the background, as
// after a method's transient error (releaseOn), for at most a lease: the
// claim, if it was made, was made before now.
func (c *call[T]) abandon(ctx context.Context, token Token, lease time.Duration) {
	if err := c.releaseOnce(ctx, token); err != nil && outage(err) {
		c.until = c.ex.now().Add(lease)
		c.releaseOn(ctx, token, nil, false)
	}
}

// schemeChanged reports whether rec's fingerprint was computed by another
// known scheme than this call's.
func (c *call[T]) schemeChanged(rec Record) bool {
	return rec.Scheme != 0 && c.m.Scheme != 0 && rec.Scheme != c.m.Scheme
}

// answer turns a record that blocked the claim into the caller's result.
// again is true when the caller should wait and claim again.
func (c *call[T]) answer(rec Record, wait bool) (v T, again bool, err error) {
	changed := false
	if rec.Fingerprint != c.fp {
		if !c.schemeChanged(rec) {
			c.emit(EventConflict, nil)
			return v, false, &mismatchError{key: c.key}
		}
		changed = true
	}
	if rec.Status == StatusProcessing && wait {
		return v, true, nil
	}
	if changed {
		c.emit(EventSchemeChanged, nil)
	}
	if c.on != nil && (rec.Status == StatusSucceeded || rec.Status == StatusFailedFinal) {
		replaying(c.on, rec.Outcome.Meta) // OriginObserver (callmeta.go)
	}
	switch rec.Status {
	case StatusSucceeded:
		r, err := c.decode(rec.Outcome)
		if err != nil {
			var zero T
			err = fmt.Errorf("%w %v (key %s): %w", ErrUndecodable, reflect.TypeFor[T](), c.key.Hex(), err)
			c.emit(EventUndecodable, err)
			return zero, false, err
		}
		c.replayed()
		return r, false, nil
	case StatusFailedFinal:
		c.replayed()
		return v, false, c.replayedError(rec.Outcome)
	default:
		c.emit(EventInProgress, nil)
		retry := rec.LeaseLeft
		if retry <= 0 {
			// The store cannot tell (a transactional store whose holder
			// has not committed): the method's lease, the longest a
			// call of it is meant to hold the key.
			retry = c.lease
		}
		return v, false, &InProgressError{Key: c.key, RetryAfter: retry}
	}
}

// replayed tells the observer and the caller's CallInfo that the call was
// answered with a stored outcome.
func (c *call[T]) replayed() {
	if c.info != nil {
		c.info.replayed.Store(true)
	}
	c.emit(EventReplayed, nil)
}

// inProgressText gives the call's key its Text, when it has none, before
// answer may put the key in an InProgressError for the caller.
func (c *call[T]) inProgressText(rec Record, parts *KeyParts) {
	if rec.Status == StatusProcessing && c.key.Text == "" {
		c.key.Text = parts.text()
	}
}

func (c *call[T]) replayedError(out Outcome) error {
	e := &ReplayedError{Code: out.ErrCode, Message: out.ErrMessage}
	switch out.ErrCode {
	case "":
		return e
	case NotStoredCode:
		e.sentinel = ErrOutcomeNotStored
		return e
	}
	for _, f := range slices.Concat(c.m.Final, c.m.Sentinels) {
		if f.Name == out.ErrCode {
			e.sentinel = f.Err
			break
		}
	}
	return e
}

// notStoredOutcome is the final outcome stored in place of one that cannot
// be stored. It is small and plain ASCII, so that every store takes it.
func notStoredOutcome() Outcome {
	return Outcome{Status: StatusFailedFinal, ErrCode: NotStoredCode, ErrMessage: ErrOutcomeNotStored.Error()}
}

// outcome classifies fn's result: the outcome to store, or decided=false
// when the error is transient and the key must be released. When the
// outcome itself cannot be stored, out is notStoredOutcome and notStored
// says why.
func (c *call[T]) outcome(v T, err error) (out Outcome, decided bool, notStored error) {
	switch {
	case err == nil:
		body, encErr := c.ex.codec.Marshal(v)
		if encErr != nil {
			return notStoredOutcome(), true, fmt.Errorf("idem: encode result of %.64q: %w", c.m.Op, encErr)
		}
		out = Outcome{Status: StatusSucceeded, Body: body}
		if c.ex.json {
			out.Meta = c.shape // see resulttype.go
		}
	case errors.As(err, new(*notStorableError)):
		// fn ran and had its effects; its result is not to be stored.
		return notStoredOutcome(), true, err
	default:
		for _, f := range c.m.Final {
			if errors.Is(err, f.Err) {
				out = Outcome{Status: StatusFailedFinal, ErrCode: f.Name, ErrMessage: err.Error()}
				break
			}
		}
		if out.Status == 0 {
			if !errors.Is(err, ErrFinal) {
				return out, false, nil
			}
			// Stored under the name of the first sentinel it matches, so
			// that the replay matches it too (see replayedError).
			out = Outcome{Status: StatusFailedFinal, ErrMessage: err.Error()}
			for _, s := range c.m.Sentinels {
				if errors.Is(err, s.Err) {
					out.ErrCode = s.Name
					break
				}
			}
		}
	}
	n := len(out.Body) + len(out.ErrCode) + len(out.ErrMessage)
	if n > MaxOutcomeLen {
		return notStoredOutcome(), true, fmt.Errorf("idem: outcome of %.64q is %d bytes: %w (idem.MaxOutcomeLen is %d)", c.m.Op, n, ErrTooLarge, MaxOutcomeLen)
	}
	if n+len(out.Meta) > MaxOutcomeLen {
		out.Meta = nil // the result type's hash never makes an outcome too large either: its replay decodes strictly
	}
	if c.on != nil {
		// The call's origin, when its observer keeps one (callmeta.go): it
		// never makes the outcome too large.
		out.Meta = originMeta(c.on, n, out.Meta)
	}
	return out, true, nil
}

// decode decodes a stored result into v: with plain json.Unmarshal when
// the executor's codec is JSONCodec and the record says that the body was
// encoded from a type of T's shape (so that it holds no member T does not
// take), with the codec's Unmarshal otherwise (see resulttype.go).
func (c *call[T]) decode(out Outcome) (T, error) {
	if c.ex.json && sameResultType(out.Meta, c.shape) {
		return decodeJSON[T](out.Body)
	}
	var v T // escapes through Codec.Unmarshal's any: declared here, allocated only here
	err := c.ex.codec.Unmarshal(out.Body, &v)
	return v, err
}

// decodeJSON returns json.Unmarshal of body into a T. When T is an unnamed
// pointer type (*Receipt) and body is not null, it decodes into a new value
// of the pointed-to type and returns its pointer: what json.Unmarshal does
// into a nil *Receipt, without the variable escaping to the heap through
// its any (one allocation per replay). body is json.Marshal's output (the
// record names T's shape), so a nil pointer is spelled "null", and decodes
// as json.Unmarshal does it.
func decodeJSON[T any](body []byte) (T, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer && t.Name() == "" && string(body) != "null" {
		p := reflect.New(t.Elem()).Interface() // a T, in an any without an allocation
		if err := unmarshalJSON(body, p); err != nil {
			var zero T
			return zero, err
		}
		return p.(T), nil
	}
	var v T
	err := unmarshalJSON(body, &v)
	return v, err
}

// unmarshalJSON is json.Unmarshal, or, for a JSONValueUnmarshaler, its own
// decoding without encoding/json's scan first (as JSONCodec.Unmarshal).
func unmarshalJSON(body []byte, p any) error {
	if u, ok := p.(JSONValueUnmarshaler); ok {
		return u.UnmarshalJSONValue(body)
	}
	return json.Unmarshal(body, p)
}

// detached returns a context for store calls after fn ran: not cancelled
// with the caller's, bounded by the executor's store timeout (a LocalStore
// does no I/O and needs no deadline). It is a method of the Executor, not of
// the generic call, so that its cancel function is no closure over a
// generic dictionary (an allocation per call).
func (ex *Executor) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if ex.local {
		return context.WithoutCancel(ctx), nop
	}
	return context.WithTimeout(context.WithoutCancel(ctx), ex.timeout)
}

// nop is the cancel function of a context that needs none.
func nop() {}

func (c *call[T]) claimedEvent(claim Claim) {
	if claim.TakenOver {
		c.emit(EventTakenOver, nil)
	} else {
		c.emit(EventClaimed, nil)
	}
}

// abnormal describes how fn left without returning: a panic's value, or
// runtime.Goexit when there is none.
func abnormal(p any) error {
	if p == nil {
		return errors.New("the method called runtime.Goexit (t.FailNow, log.Fatal) instead of returning")
	}
	return fmt.Errorf("panic: %v", p)
}

// run executes fn under a committed claim and stores or releases.
func run[T any](ctx context.Context, c *call[T], claim Claim, token Token, lease time.Duration, renew bool, fn func(context.Context) (T, error)) (v T, err error) {
	c.claimedEvent(claim)
	kc := &keyContext{Context: ctx, id: c.key.ID} // ContextWithKey
	mctx := context.Context(kc)
	c.bare = kc.detached()
	var rn *renewal
	if renew {
		mctx, rn = c.startRenewal(mctx, token, lease)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (recover is the panic's value) or called
		// runtime.Goexit (recover is nil, and Goexit goes on).
		rn.stop()
		p := recover()
		c.release(ctx, token, abnormal(p))
		if p != nil {
			panic(p)
		}
	}()
	v, err = fn(mctx)
	returned = true
	rn.stop()
	if t := rn.renewedUntil(); t.After(c.until) {
		c.until = t
	}
	out, decided, notStored := c.outcome(v, err)
	if decided && out.Status == StatusFailedFinal && notStored == nil && mutated(ctx, mReleaseAfterFinal) {
		decided = false // a known mistake, switched on only by the simulator's tests
	}
	err = markFinal(decided, err)
	if !decided {
		c.release(ctx, token, err)
		if lost := rn.lostLease(); lost != nil && !errors.Is(err, ErrLeaseLost) {
			// The method gave up because its context was cancelled for the
			// lost lease: say so, not only "context canceled".
			err = fmt.Errorf("%w; the method returned: %w", lost, err)
		}
		return v, err
	}
	k := keeper{token: token, out: out, notStored: notStored, lease: lease, renewTill: c.ex.instant().Add(lease)}
	switch c.keep(ctx, &k) {
	case keptLost:
		var zero T
		return zero, k.err
	case keptPending:
		// The caller's context ended while the store could not be
		// reached: a goroutine goes on storing the outcome while the
		// claim can be live, and the caller is told so (a retry meanwhile
		// finds the claim and gets ErrInProgress, then the outcome).
		var zero T
		pending := &OutcomePendingError{Key: c.key, RetryAfter: max(c.until.Sub(c.ex.now()), 0), Cause: context.Cause(ctx), Err: k.err}
		c.keepOn(ctx, k)
		return zero, pending
	}
	// Stored, or the claim's lease ended before the store could be reached
	// (the observer was told, and a retry now runs the method again: the
	// documented limit of lease mode): the method ran, so the caller gets
	// its result either way.
	return v, err
}

// markFinal marks a decided error with Final, so that the first caller's
// error matches ErrFinal as its replays do (a final= sentinel is returned
// by the method unmarked). errors.Is and errors.As see through it.
func markFinal(decided bool, err error) error {
	if decided && err != nil && !errors.Is(err, ErrFinal) {
		return Final(err)
	}
	return err
}

func (c *call[T]) release(ctx context.Context, token Token, cause error) {
	err := c.releaseOnce(ctx, token)
	switch {
	case err == nil:
		c.emit(EventReleased, cause)
	case errors.Is(err, ErrLeaseLost):
		c.emit(EventLeaseLost, err)
	default:
		c.emit(EventStoreError, &storeError{key: c.key, call: "release", err: err})
		if outage(err) && !mutated(ctx, mReleaseOutageGiveUp) { // a known mistake, for the simulator's tests
			c.releaseOn(ctx, token, cause, true)
		}
	}
}

// releaseOnce makes one Release call, detached from the caller's
// cancellation and bounded by the store timeout.
func (c *call[T]) releaseOnce(ctx context.Context, token Token) error {
	dctx, cancel := c.detached(ctx)
	defer cancel()
	return c.ex.store.Release(dctx, c.key, token)
}

// releaseOn tries again, in a goroutine of its own, to release a claim that
// a store in an outage still holds (see outage), with keep's backoff on the executor's clock, until the release passes, the
// store answers otherwise, or the claim's lease has ended (a retry then
// takes the key over, which is as good). Without it, a store outage as the
// method fails would keep every retry of a call that changed nothing
// waiting, or refused with ErrInProgress, for the rest of the lease. The
// caller is not kept waiting: it has its error already. Its context carries
// the caller's values and the call's key, as keepOn's does. claimed says
// that the call held the claim (not an abandoned one that may not exist):
// only then is EventReleased emitted.
func (c *call[T]) releaseOn(ctx context.Context, token Token, cause error, claimed bool) {
	rc := *c      // a copy: c is its caller's, which returns now
	rc.bare = nil // the goroutine's store calls get its own context
	rctx, cancel := context.WithCancel(ContextWithKey(context.WithoutCancel(ctx), c.key))
	rc.ex.spawn(func() {
		defer cancel() // last: a simulator learns from it that the goroutine ended
		lease := rc.until.Sub(rc.ex.now())
		backoff := keepBackoffMin
		for {
			// Its first act is a Sleep, even when the lease has ended
			// already (a simulator adopts the goroutine there).
			left := rc.until.Sub(rc.ex.now())
			if rc.ex.clock.Sleep(rctx, max(min(backoff, left), 0)) != nil || left <= 0 {
				return
			}
			err := rc.releaseOnce(rctx, token)
			switch {
			case err == nil:
				if claimed {
					rc.emit(EventReleased, cause)
				}
				return
			case errors.Is(err, ErrLeaseLost):
				return // taken over, or released by an attempt whose reply was lost
			case !outage(err):
				rc.emit(EventStoreError, &storeError{key: rc.key, call: "release", err: err})
				return
			}
			backoff = min(backoff*4, max(min(lease/8, keepBackoffMax), keepBackoffMin))
		}
	})
}

// keeper is the state of storing one decided outcome in lease mode (see
// call.keep).
type keeper struct {
	token     Token
	out       Outcome
	notStored error // set when out is the substitute notStoredOutcome, and why
	lease     time.Duration
	renewTill time.Time     // a lease after the method returned: renewals extend the claim up to here
	wait      time.Duration // the sleep before the next attempt
	backoff   time.Duration
	attempts  int       // Complete calls so far
	refusals  int       // Complete calls the store answered with a refusal
	since     time.Time // the first failure
	err       error     // the last failure, wrapped
}

// keepResult says how call.keep ended.
type keepResult uint8

const (
	keptStored  keepResult = iota // the outcome (or its substitute) is stored
	keptLost                      // ErrLeaseLost: another token holds the key (k.err)
	keptGaveUp                    // the claim's lease ended before the store could be reached
	keptPending                   // the caller's context ended first: go on with keepOn
)

// Backoff between attempts to store an outcome: from keepBackoffMin, times
// four, up to an eighth of the lease, within [keepBackoffMin, keepBackoffMax].
const (
	keepBackoffMin = 10 * time.Millisecond
	keepBackoffMax = time.Second
)

// keep stores k.out, fenced by k.token, for as long as the claim can be
// live. A store that answers and refuses (after the executor's attempts, or
// at once for ErrTooLarge) gets the substitute notStoredOutcome instead, so
// that no encoding or storage error turns a decided outcome into a second
// execution. A store in an outage (see outage: unreachable, or an answer
// that can pass) is tried again, with backoff on the executor's clock, until the outcome is stored,
// another token holds the key (ErrLeaseLost), or the claim's lease has
// certainly ended (c.until): a store outage shorter than the lease loses
// nothing. Where the store renews leases (Renewer), a claim that has less
// than half its lease left is renewed, up to a lease after the method
// returned. Each store call runs detached from the caller's cancellation,
// bounded by the store timeout; the sleeps between them end with ctx, and
// keep then returns keptPending (the caller gave up; keepOn goes on).
func (c *call[T]) keep(ctx context.Context, k *keeper) keepResult {
	for {
		if k.wait > 0 {
			if c.ex.clock.Sleep(ctx, k.wait) != nil {
				return keptPending
			}
			k.wait = 0
		}
		err := c.completeOnce(ctx, k)
		k.attempts++
		if err == nil {
			if k.notStored != nil {
				c.emit(EventOutcomeNotStored, k.notStored)
			} else {
				c.emit(EventCompleted, nil)
			}
			return keptStored
		}
		if mutated(ctx, mLostCompleteReplyAsLeaseLost) {
			err = ErrLeaseLost // a known mistake, switched on only by the simulator's tests
		}
		if errors.Is(err, ErrLeaseLost) {
			k.err = &storeError{key: c.key, call: "complete", err: err}
			c.emit(EventLeaseLost, k.err)
			return keptLost
		}
		now := c.ex.now()
		if k.since.IsZero() {
			k.since = now
		}
		k.err = &storeError{key: c.key, call: "complete", err: err}
		if !outage(err) || mutated(ctx, mOutageAsRefusal) {
			// The store answered and refused.
			k.refusals++
			switch {
			case k.notStored != nil:
				c.emit(EventStoreError, k.err) // even the substitute is refused
				return keptGaveUp
			case errors.Is(err, ErrTooLarge) || k.refusals >= c.ex.attempts:
				k.notStored, k.out = k.err, notStoredOutcome()
				continue
			}
		}
		if !now.Before(c.until) || mutated(ctx, mQuickCompleteGiveUp) && k.attempts >= c.ex.attempts {
			// The claim cannot be live any more: a retry may take the key
			// over and run the method again.
			c.emit(EventStoreError, fmt.Errorf("idem: complete key %s: not stored within the claim's lease (tried %d times for %v): %w",
				c.key.Hex(), k.attempts, now.Sub(k.since), err))
			return keptGaveUp
		}
		c.emit(EventStoreRetry, k.err)
		if c.renewKept(ctx, k, now) {
			continue // the record is no longer the token's claim: the next Complete tells why
		}
		if k.backoff == 0 {
			k.backoff = keepBackoffMin
		} else {
			k.backoff = min(k.backoff*4, max(min(k.lease/8, keepBackoffMax), keepBackoffMin))
		}
		k.wait = max(min(k.backoff, c.until.Sub(c.ex.now())), time.Millisecond)
	}
}

// completeOnce makes one Complete call of k.out, detached from the caller's
// cancellation and bounded by the store timeout.
func (c *call[T]) completeOnce(ctx context.Context, k *keeper) error {
	dctx, cancel := c.detached(ctx)
	defer cancel()
	return c.ex.store.Complete(dctx, c.key, k.token, k.out, c.m.TTL)
}

// renewKept renews the claim of a kept outcome when the store can, the
// claim has less than half its lease left, and the method returned less
// than a lease ago. It reports true when the store says the token no
// longer holds a claim (ErrLeaseLost): its outcome may have been stored by
// an attempt whose reply was lost, or another token took the key over.
func (c *call[T]) renewKept(ctx context.Context, k *keeper, now time.Time) bool {
	if c.ex.renewer == nil || c.until.Sub(now) >= k.lease/2 || !now.Before(k.renewTill) {
		return false
	}
	dctx, cancel := c.detached(ctx)
	err := c.ex.renewer.Renew(dctx, c.key, k.token, k.lease)
	cancel()
	switch {
	case err == nil:
		c.until = c.ex.now().Add(k.lease)
		c.emit(EventRenewed, nil)
	case errors.Is(err, ErrLeaseLost):
		return true
	}
	return false
}

// keepOn goes on with k in a goroutine of its own after the caller's
// context ended (see keep). Its context carries the caller's values and the
// call's key, not its cancellation, and is cancelled when it ends.
func (c *call[T]) keepOn(ctx context.Context, k keeper) {
	kc := *c      // a copy: c is its caller's, which returns now
	kc.bare = nil // the goroutine's store calls get its own context
	kctx, cancel := context.WithCancel(ContextWithKey(context.WithoutCancel(ctx), c.key))
	kc.ex.spawn(func() {
		defer cancel() // last: a simulator learns from it that the goroutine ended
		kc.keep(kctx, &k)
	})
}

// runTx executes fn inside the store transaction that holds the claim.
func runTx[T any](ctx context.Context, c *call[T], claim Claim, txn Txn, fn func(context.Context) (T, error)) (v T, err error) {
	c.claimedEvent(claim)
	returned := false
	defer func() {
		if returned {
			return
		}
		// A panic or runtime.Goexit: roll back, so that neither the
		// transaction nor its connection and row lock are left open.
		p := recover()
		c.releaseTx(ctx, txn, abnormal(p))
		if p != nil {
			panic(p)
		}
	}()
	v, err = fn(withOpenTxn(txn.Context(ContextWithKey(ctx, c.key)), txn))
	returned = true
	out, decided, notStored := c.outcome(v, err)
	err = markFinal(decided, err)
	if !decided {
		c.releaseTx(ctx, txn, err)
		return v, err
	}
	dctx, cancel := c.ex.detached(ctx)
	defer cancel()
	// A final error discards fn's writes. A success commits them, also when
	// its result cannot be stored and the substitute outcome stands in: the
	// caller gets the result, so the writes behind it must be there; so does
	// NotStorable, which says fn ran and had its effects.
	if cerr := txn.Complete(dctx, out, c.m.TTL, err != nil && !errors.As(err, new(*notStorableError))); cerr != nil {
		// The commit failed: the method's writes were not committed either,
		// so the call did not happen and a retry will execute it.
		var zero T
		return zero, c.storeError("commit", cerr)
	}
	if notStored != nil {
		c.emit(EventOutcomeNotStored, notStored)
	} else {
		c.emit(EventCompleted, nil)
	}
	return v, err
}

func (c *call[T]) releaseTx(ctx context.Context, txn Txn, cause error) {
	dctx, cancel := c.ex.detached(ctx)
	defer cancel()
	if err := txn.Release(dctx); err != nil {
		c.emit(EventStoreError, &storeError{key: c.key, call: "rollback", err: err})
		return
	}
	c.emit(EventReleased, cause)
}

// renewal extends a claim's lease while the method runs (see WithRenewal).
type renewal struct {
	halt   context.CancelFunc      // ends the renewals
	cancel context.CancelCauseFunc // cancels the method's context
	done   chan struct{}           // closed when the renewals ended
	lost   error                   // set when a renewal found the lease lost, before done
	until  time.Time               // a lease after the reply of the last renewal, before done
}

// startRenewal renews the claim of token every third of lease until stop,
// and returns the method's context, which a lost lease cancels.
func (c *call[T]) startRenewal(ctx context.Context, token Token, lease time.Duration) (context.Context, *renewal) {
	mctx, cancel := context.WithCancelCause(ctx)
	rctx, halt := context.WithCancel(context.WithoutCancel(ctx))
	r := &renewal{halt: halt, cancel: cancel, done: make(chan struct{})}
	rc := *c // a copy, so that c stays on its caller's stack when renewal is off
	rc.ex.spawn(func() { rc.renewals(rctx, r, token, lease) })
	return mctx, r
}

func (c *call[T]) renewals(ctx context.Context, r *renewal, token Token, lease time.Duration) {
	defer close(r.done)
	every := max(lease/3, time.Millisecond)
	for c.ex.clock.Sleep(ctx, every) == nil {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if !c.ex.local {
			rctx, cancel = context.WithTimeout(ctx, c.ex.timeout)
		}
		err := c.ex.renewer.Renew(rctx, c.key, token, lease)
		cancel()
		switch {
		case err == nil:
			// Reported and counted even when the method returned
			// meanwhile: the renewal happened, and the outcome is kept
			// (lease mode) for as long as this lease lasts.
			r.until = c.ex.now().Add(lease)
			c.emit(EventRenewed, nil)
		case ctx.Err() != nil:
			return // the method returned meanwhile
		case errors.Is(err, ErrLeaseLost):
			err = &storeError{key: c.key, call: "renew", err: err}
			c.emit(EventLeaseLost, err)
			r.lost = err
			r.cancel(err)
			return
		default:
			c.emit(EventStoreError, &storeError{key: c.key, call: "renew", err: err})
		}
	}
}

// lostLease returns the error of the renewal that found the lease lost, or
// nil; call it after stop. A nil renewal lost nothing.
func (r *renewal) lostLease() error {
	if r == nil {
		return nil
	}
	return r.lost
}

// renewedUntil returns when the claim renewed last stops being live at
// the latest, or the zero time; call it after stop.
func (r *renewal) renewedUntil() time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.until
}

// stop ends the renewals and waits for them, so that none runs once the
// method returned. A nil renewal does nothing.
func (r *renewal) stop() {
	if r == nil {
		return
	}
	r.halt()
	<-r.done
	r.cancel(nil)
}

// waiter paces a duplicate that waits for a running call (inflight=wait:d).
type waiter struct {
	deadline time.Time
	clock    Clock
	backoff  time.Duration
}

// more reports whether there is time left to wait; a nil waiter has none.
func (w *waiter) more() bool { return w != nil && w.clock.Now().Before(w.deadline) }

func (w *waiter) sleep(ctx context.Context, leaseLeft time.Duration) error {
	if w.backoff == 0 {
		w.backoff = 2 * time.Millisecond
	} else {
		w.backoff = min(w.backoff*2, 100*time.Millisecond)
	}
	d := min(w.backoff, w.deadline.Sub(w.clock.Now()))
	if leaseLeft > 0 {
		d = min(d, leaseLeft+time.Millisecond)
	}
	d = max(d, time.Millisecond)
	return w.clock.Sleep(ctx, d)
}
