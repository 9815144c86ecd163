// Package idemotel reports idemgen's executor, sweeper and store sizes to
// OpenTelemetry: metrics of calls by outcome, events, durations of calls,
// methods and store operations, claims in flight, store size against its
// bound and sweeper rows removed; and a span per idempotent call with child
// spans for the method and each store operation.
//
// It is a module of its own, so that programs that do not use it do not
// depend on OpenTelemetry. One line turns it on:
//
//	ex := idem.NewExecutor(store, idem.WithTenant(tenantOf), idemotel.Instrument(idemotel.WithStoreName("pgstore")))
//
// The meter and tracer providers default to the global ones (otel.Meter,
// otel.Tracer). The key's text and the tenant may carry personal data: they
// are never metric attributes, and spans carry only the key's hex ID (a
// SHA-256 of tenant, operation and key parts) unless WithKeys is given. See
// README.md for the table of metric names.
//
// A call's span is kept with the outcome it stores (its trace and span IDs
// and flags, in the record's metadata: idem.OriginObserver), and the span
// of every replay of that outcome links to it (a trace.Link with
// idem.link=original_call), in this process or another over the same
// store.
package idemotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/idemgen/idemgen/runtime/idemotel"

// Attribute keys.
const (
	AttrOp             = attribute.Key("idem.op")              // the Method's Op
	AttrStore          = attribute.Key("idem.store.name")      // WithStoreName
	AttrOutcome        = attribute.Key("idem.outcome")         // a call's outcome (Outcome*)
	AttrEvent          = attribute.Key("idem.event")           // an idem.EventKind's name
	AttrStoreOperation = attribute.Key("idem.store.operation") // claim, complete, release, renew, claim_tx, commit, rollback
	AttrReplayed       = attribute.Key("idem.replayed")        // the call replayed a stored outcome
	AttrKeyID          = attribute.Key("idem.key.id")          // the key's hex ID (a SHA-256)
	AttrKey            = attribute.Key("idem.key")             // the key's text (WithKeys only)
	AttrTenant         = attribute.Key("idem.tenant")          // the tenant (WithKeys only)
	AttrErrorType      = attribute.Key("error.type")           // the class of a failure
	AttrLink           = attribute.Key("idem.link")            // why a call's span links to another (LinkOriginalCall)
)

// LinkOriginalCall is the idem.link attribute of the link from a replay's
// span to the span of the call that ran the method and stored the outcome.
const LinkOriginalCall = "original_call"

// EventOriginUnreadable is the event on a replay's span whose record keeps
// metadata this release cannot read (idem.ErrUnreadableMeta: written by a
// later release, or damaged): the replay has no link, and goes on.
const EventOriginUnreadable = "origin_unreadable"

// Call outcomes (the idem.outcome attribute of idem.calls and of the span).
const (
	OutcomeExecuted         = "executed"           // claimed a free key, ran the method, stored the outcome
	OutcomeTakenOver        = "taken_over"         // took over a lapsed lease, ran the method, stored the outcome
	OutcomeReplayed         = "replayed"           // a stored outcome was replayed
	OutcomeConflict         = "conflict"           // the key was reused with another payload
	OutcomeInProgress       = "in_progress"        // another call holds the key
	OutcomeMissingKey       = "missing_key"        // a key part was empty
	OutcomeReleased         = "released"           // a transient error, panic or cancellation released the key
	OutcomeLeaseLost        = "lease_lost"         // the claim was taken over before the outcome was stored
	OutcomeStoreError       = "store_error"        // a store call failed
	OutcomeOutcomeNotStored = "outcome_not_stored" // the method ran; its outcome could not be stored
	OutcomeUndecodable      = "undecodable"        // a stored result did not decode
	OutcomeCanceled         = "canceled"           // the caller's context ended while claiming or waiting
	OutcomeRejected         = "rejected"           // the Method or its key was refused before any claim
)

// durationBuckets are the bucket boundaries of the duration histograms, in
// seconds: OpenTelemetry's semantic conventions for HTTP durations, 5ms to
// 10s. The SDK's default boundaries (0, 5, 10, …, 10000) suit
// milliseconds, and would put every call under 5s in one bucket.
func durationBuckets() metric.HistogramOption {
	return metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
}

// Option configures Instrument, SweepObserver and ObserveSize.
type Option func(*config)

type config struct {
	mp     metric.MeterProvider
	tp     trace.TracerProvider
	store  string
	keys   bool
	maxOps int // WithMaxOps; 0: DefaultMaxOps
	bad    string
}

// DefaultMaxOps is how many operations get an idem.op value of their own
// on metrics when WithMaxOps is not given.
const DefaultMaxOps = 1000

// OtherOp is the idem.op value on metrics of every operation past the
// first WithMaxOps (the spelling of OpenTelemetry's semantic conventions
// for a value outside a bounded set).
const OtherOp = "_OTHER"

// WithMaxOps bounds the idem.op values on metrics at n (default
// DefaultMaxOps): the first n operations the executor runs keep their
// names, every later one is counted as OtherOp. An operation may come
// from a request (idemhttp names a request that matched no route pattern
// by its path), and each idem.op value is a metric stream of its own in
// every exporter and backend: without a bound, clients sending ever-new
// paths would grow them without limit. Spans always carry the true name.
// Instrument panics if n is not positive.
func WithMaxOps(n int) Option {
	return func(c *config) {
		if n <= 0 {
			c.bad = fmt.Sprintf("WithMaxOps(%d): the bound must be positive", n)
			return
		}
		c.maxOps = n
	}
}

// WithMeterProvider sets the meter provider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the tracer provider (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithStoreName sets the idem.store.name attribute of every metric and span
// ("pgstore", "redis-eu"); without it the attribute is left out.
func WithStoreName(name string) Option { return func(c *config) { c.store = name } }

// WithKeys puts the key's text (idem.key) and the tenant (idem.tenant) on
// the call's span, and the events' error texts (which name the key) on its
// events. They may carry personal data; they never go on metrics.
func WithKeys() Option { return func(c *config) { c.keys = true } }

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// storeAttrs returns the store attribute, if named.
func (c *config) storeAttrs() []attribute.KeyValue {
	if c.store == "" {
		return nil
	}
	return []attribute.KeyValue{AttrStore.String(c.store)}
}

// hook is the idem.CallHook of Instrument.
type hook struct {
	cfg         config
	tracer      trace.Tracer
	calls       metric.Int64Counter
	events      metric.Int64Counter
	callDur     metric.Float64Histogram
	methodDur   metric.Float64Histogram
	storeOpDur  metric.Float64Histogram
	claimsInUse metric.Int64UpDownCounter
	// ops maps each of the first maxOps operations to its metric
	// attributes (idem.op and idem.store.name), shared by its calls;
	// nops counts them, other holds OtherOp's.
	ops    sync.Map
	nops   atomic.Int64
	maxOps int64
	other  []attribute.KeyValue
}

// metricAttrs returns the metric attributes of op's calls: its own for the
// first maxOps operations, OtherOp's for every later one. The slice is
// shared: callers append to a copy (see callObserver.Event).
func (h *hook) metricAttrs(op string) []attribute.KeyValue {
	if v, ok := h.ops.Load(op); ok {
		return v.([]attribute.KeyValue)
	}
	if h.nops.Add(1) > h.maxOps {
		h.nops.Add(-1)
		return h.other
	}
	attrs := append([]attribute.KeyValue{AttrOp.String(op)}, h.cfg.storeAttrs()...)
	if v, loaded := h.ops.LoadOrStore(op, attrs); loaded {
		h.nops.Add(-1)
		return v.([]attribute.KeyValue)
	}
	return attrs
}

// Instrument returns the executor option that reports every call of Do to
// OpenTelemetry. It panics if an instrument cannot be created (the SDK
// refuses only invalid names, which these are not).
func Instrument(opts ...Option) idem.Option {
	cfg := newConfig(opts)
	if cfg.bad != "" {
		panic("idemotel: Instrument: " + cfg.bad)
	}
	m := cfg.mp.Meter(ScopeName)
	h := &hook{cfg: cfg, tracer: cfg.tp.Tracer(ScopeName), maxOps: int64(cfg.maxOps)}
	if h.maxOps == 0 {
		h.maxOps = DefaultMaxOps
	}
	h.other = append([]attribute.KeyValue{AttrOp.String(OtherOp)}, cfg.storeAttrs()...)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	h.calls, err = m.Int64Counter("idem.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Idempotent calls (idem.Do), by outcome."))
	add(err)
	h.events, err = m.Int64Counter("idem.events", metric.WithUnit("{event}"),
		metric.WithDescription("Executor events (idem.EventKind), by kind."))
	add(err)
	h.callDur, err = m.Float64Histogram("idem.call.duration", metric.WithUnit("s"), durationBuckets(),
		metric.WithDescription("Duration of idempotent calls, by outcome."))
	add(err)
	h.methodDur, err = m.Float64Histogram("idem.method.duration", metric.WithUnit("s"), durationBuckets(),
		metric.WithDescription("Duration of the wrapped method's runs."))
	add(err)
	h.storeOpDur, err = m.Float64Histogram("idem.store.operation.duration", metric.WithUnit("s"), durationBuckets(),
		metric.WithDescription("Duration of the executor's store operations, by operation."))
	add(err)
	h.claimsInUse, err = m.Int64UpDownCounter("idem.claims.active", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims held by calls of this process whose method runs or whose outcome is being stored."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		panic("idemotel: Instrument: " + err.Error())
	}
	return idem.WithCallHook(h)
}

// StartCall implements idem.CallHook.
func (h *hook) StartCall(ctx context.Context, m *idem.Method, at time.Time) (context.Context, idem.CallObserver) {
	attrs := h.metricAttrs(m.Op)
	spanAttrs := attrs
	if attrs[0].Value.AsString() != m.Op { // OtherOp: the span keeps the true name
		spanAttrs = append([]attribute.KeyValue{AttrOp.String(m.Op)}, attrs[1:]...)
	}
	ctx, span := h.tracer.Start(ctx, "idem.Do", trace.WithTimestamp(at), trace.WithAttributes(spanAttrs...),
		trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, &callObserver{h: h, span: span, attrs: attrs, spanAttrs: spanAttrs, start: at}
}

// The call's observer keeps the call's span with its outcome, for the
// replays' links.
var _ idem.OriginObserver = (*callObserver)(nil)

// callObserver follows one call.
type callObserver struct {
	h         *hook
	span      trace.Span
	attrs     []attribute.KeyValue // idem.op and idem.store.name, of metrics (see hook.metricAttrs)
	spanAttrs []attribute.KeyValue // the same, of spans: the true op
	start     time.Time

	mu        sync.Mutex
	outcome   string
	claimed   bool
	takenOver bool
	keyed     bool
}

// terminal maps the events that decide a call's outcome.
var terminal = map[idem.EventKind]string{
	idem.EventReplayed:         OutcomeReplayed,
	idem.EventConflict:         OutcomeConflict,
	idem.EventInProgress:       OutcomeInProgress,
	idem.EventReleased:         OutcomeReleased,
	idem.EventLeaseLost:        OutcomeLeaseLost,
	idem.EventStoreError:       OutcomeStoreError,
	idem.EventOutcomeNotStored: OutcomeOutcomeNotStored,
	idem.EventUndecodable:      OutcomeUndecodable,
	idem.EventCanceled:         OutcomeCanceled,
}

// Event implements idem.CallObserver.
func (o *callObserver) Event(ev idem.Event) {
	ctx := context.Background()
	o.mu.Lock()
	if !o.keyed {
		o.keyed = true
		o.span.SetAttributes(AttrKeyID.String(ev.Key.Hex()))
		if o.h.cfg.keys {
			o.span.SetAttributes(AttrKey.String(ev.Key.Text), AttrTenant.String(ev.Key.Tenant))
		}
	}
	claimedNow := false
	switch ev.Kind {
	case idem.EventClaimed, idem.EventTakenOver:
		claimedNow = !o.claimed
		o.claimed = true
		o.takenOver = ev.Kind == idem.EventTakenOver
	case idem.EventCompleted:
		o.outcome = OutcomeExecuted
		if o.takenOver {
			o.outcome = OutcomeTakenOver
		}
	default:
		if out, ok := terminal[ev.Kind]; ok {
			o.outcome = out
		}
	}
	o.mu.Unlock()
	if claimedNow {
		o.h.claimsInUse.Add(ctx, 1, metric.WithAttributes(o.attrs...))
	}
	o.h.events.Add(ctx, 1, metric.WithAttributes(append(o.attrs[:len(o.attrs):len(o.attrs)], AttrEvent.String(ev.Kind.String()))...))
	evAttrs := []attribute.KeyValue{}
	if ev.Err != nil {
		evAttrs = append(evAttrs, AttrErrorType.String(errorType(ev.Err)))
		if o.h.cfg.keys {
			evAttrs = append(evAttrs, attribute.String("exception.message", ev.Err.Error()))
		}
	}
	o.span.AddEvent(ev.Kind.String(), trace.WithAttributes(evAttrs...))
}

// Method implements idem.CallObserver.
func (o *callObserver) Method(ctx context.Context, at time.Time) (context.Context, func(time.Time, error)) {
	ctx, span := o.h.tracer.Start(ctx, "idem.method", trace.WithTimestamp(at), trace.WithAttributes(o.spanAttrs...))
	return ctx, func(end time.Time, err error) {
		attrs := o.attrs
		if err != nil {
			et := "_OTHER"
			if errors.Is(err, idem.ErrCallAborted) {
				et = "aborted"
			}
			attrs = append(attrs[:len(attrs):len(attrs)], AttrErrorType.String(et))
			span.SetAttributes(AttrErrorType.String(et))
		}
		o.h.methodDur.Record(context.Background(), end.Sub(at).Seconds(), metric.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(end))
	}
}

// StoreOp implements idem.CallObserver.
func (o *callObserver) StoreOp(ctx context.Context, op string, at time.Time) (context.Context, func(time.Time, error)) {
	attrs := append(o.attrs[:len(o.attrs):len(o.attrs)], AttrStoreOperation.String(op))
	spanAttrs := attrs
	if &o.spanAttrs[0] != &o.attrs[0] {
		spanAttrs = append(o.spanAttrs[:len(o.spanAttrs):len(o.spanAttrs)], AttrStoreOperation.String(op))
	}
	ctx, span := o.h.tracer.Start(ctx, "idem.store."+op, trace.WithTimestamp(at), trace.WithAttributes(spanAttrs...),
		trace.WithSpanKind(trace.SpanKindClient))
	return ctx, func(end time.Time, err error) {
		a := attrs
		if err != nil {
			et := errorType(err)
			a = append(a[:len(a):len(a)], AttrErrorType.String(et))
			span.SetAttributes(AttrErrorType.String(et))
			if et != "lease_lost" {
				span.SetStatus(codes.Error, et)
			}
		}
		o.h.storeOpDur.Record(context.Background(), end.Sub(at).Seconds(), metric.WithAttributes(a...))
		span.End(trace.WithTimestamp(end))
	}
}

// Origin implements idem.OriginObserver: the call's span, kept with the
// outcome it stores so that its replays link to it. An invalid span context
// (a no-op tracer provider) keeps none.
func (o *callObserver) Origin() idem.TraceOrigin {
	sc := o.span.SpanContext()
	if !sc.IsValid() {
		return idem.TraceOrigin{}
	}
	return idem.TraceOrigin{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// Replaying implements idem.OriginObserver: the replay's span links to the
// span of the call that stored the outcome (idem.link=original_call), when
// the record keeps it.
func (o *callObserver) Replaying(meta idem.CallMeta, err error) {
	if err != nil {
		// Not the key's text: ParseMeta's errors name bytes and versions.
		o.span.AddEvent(EventOriginUnreadable, trace.WithAttributes(attribute.String("exception.message", err.Error())))
		return
	}
	if !meta.Origin.IsValid() {
		return
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    meta.Origin.TraceID,
		SpanID:     meta.Origin.SpanID,
		TraceFlags: trace.TraceFlags(meta.Origin.Flags),
		Remote:     true,
	})
	o.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(LinkOriginalCall)}})
}

// Wait implements idem.CallObserver.
func (o *callObserver) Wait(at time.Time, d time.Duration) {
	o.span.AddEvent("wait", trace.WithTimestamp(at), trace.WithAttributes(attribute.Float64("idem.wait.left", d.Seconds())))
}

// End implements idem.CallObserver.
func (o *callObserver) End(at time.Time, err error) {
	ctx := context.Background()
	o.mu.Lock()
	outcome, claimed := o.outcome, o.claimed
	o.mu.Unlock()
	switch {
	case errors.Is(err, idem.ErrMissingKey):
		outcome = OutcomeMissingKey
	case outcome == "" && err != nil:
		outcome = OutcomeRejected
	case outcome == "":
		outcome = OutcomeExecuted
	}
	if claimed {
		o.h.claimsInUse.Add(ctx, -1, metric.WithAttributes(o.attrs...))
	}
	attrs := append(o.attrs[:len(o.attrs):len(o.attrs)], AttrOutcome.String(outcome))
	o.h.calls.Add(ctx, 1, metric.WithAttributes(attrs...))
	o.h.callDur.Record(ctx, at.Sub(o.start).Seconds(), metric.WithAttributes(attrs...))
	o.span.SetAttributes(AttrOutcome.String(outcome), AttrReplayed.Bool(outcome == OutcomeReplayed))
	switch outcome {
	case OutcomeStoreError, OutcomeLeaseLost, OutcomeOutcomeNotStored, OutcomeUndecodable:
		o.span.SetStatus(codes.Error, outcome)
	}
	if errors.Is(err, idem.ErrCallAborted) {
		o.span.SetStatus(codes.Error, "aborted")
	}
	o.span.End(trace.WithTimestamp(at))
}

// errorType names an error's class for the error.type attribute, without
// its text (which may name the key).
func errorType(err error) string {
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease_lost"
	case errors.As(err, new(*idem.TenantQuotaError)):
		return "tenant_quota" // the tenant's share of the store, not the store
	case errors.Is(err, idem.ErrStoreFull):
		return "store_full"
	case errors.Is(err, idem.ErrTooLarge):
		return "too_large"
	case errors.Is(err, idem.ErrPayloadMismatch):
		return "payload_mismatch"
	case errors.Is(err, idem.ErrUndecodable):
		return "undecodable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return "_OTHER"
}
