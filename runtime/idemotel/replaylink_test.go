package idemotel_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// tracer is an executor's tracing: a recorder of its ended spans.
type tracer struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newTracer(opts ...sdktrace.TracerProviderOption) tracer {
	rec := tracetest.NewSpanRecorder()
	return tracer{rec: rec, tp: sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(rec))...)}
}

// executor returns an executor on st instrumented with tr.
func (tr tracer) executor(st idem.Store) *idem.Executor {
	return idem.NewExecutor(st, idemotel.Instrument(idemotel.WithTracerProvider(tr.tp)), idem.SingleTenant())
}

// calls returns the idem.Do spans recorded so far, in the order they ended.
func (tr tracer) calls(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == "idem.Do" {
			out = append(out, s)
		}
	}
	return out
}

// last returns the last idem.Do span, and checks its outcome.
func (tr tracer) last(t *testing.T, outcome string) sdktrace.ReadOnlySpan {
	t.Helper()
	calls := tr.calls(t)
	if len(calls) == 0 {
		t.Fatal("no idem.Do span")
	}
	s := calls[len(calls)-1]
	if got := attr(s.Attributes(), idemotel.AttrOutcome); got != outcome {
		t.Fatalf("span of the call: idem.outcome %q, want %q", got, outcome)
	}
	return s
}

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// checkLink checks that replay's span has exactly one link, to original's
// span, named idem.link=original_call.
func checkLink(t *testing.T, replay sdktrace.ReadOnlySpan, original trace.SpanContext) {
	t.Helper()
	links := replay.Links()
	if len(links) != 1 {
		t.Fatalf("the replay's span has %d links, want 1 (to %s)", len(links), original.SpanID())
	}
	l := links[0]
	if l.SpanContext.TraceID() != original.TraceID() || l.SpanContext.SpanID() != original.SpanID() ||
		l.SpanContext.TraceFlags() != original.TraceFlags() {
		t.Errorf("link to trace %s span %s flags %s, want trace %s span %s flags %s",
			l.SpanContext.TraceID(), l.SpanContext.SpanID(), l.SpanContext.TraceFlags(),
			original.TraceID(), original.SpanID(), original.TraceFlags())
	}
	if !l.SpanContext.IsRemote() {
		t.Error("the link's span context is not remote")
	}
	if got := attr(l.Attributes, idemotel.AttrLink); got != idemotel.LinkOriginalCall {
		t.Errorf("link attribute idem.link = %q, want %q", got, idemotel.LinkOriginalCall)
	}
	if replay.SpanContext().TraceID() == original.TraceID() {
		t.Error("the replay runs in the original call's trace: the test proves nothing")
	}
}

func noLinks(t *testing.T, s sdktrace.ReadOnlySpan, what string) {
	t.Helper()
	if n := len(s.Links()); n != 0 {
		t.Errorf("%s: %d links, want none: %v", what, n, s.Links())
	}
	for _, e := range s.Events() {
		if e.Name == idemotel.EventOriginUnreadable {
			t.Errorf("%s: event %s %v", what, e.Name, e.Attributes)
		}
	}
}

var errDeclined = errors.New("declined")

func mustNotRun(context.Context) (string, error) { return "", errors.New("the method ran again") }

// TestReplayLinksOriginalCall: the span of a replay links to the span of
// the call that ran the method, through the record's metadata on every
// store (PostgreSQL in both modes, Redis and tiered: the metadata's round
// trip through a real server is the point): by the same executor, by
// another (a restart), for a stored final error, with the original under a
// remote parent; and a record written without idemotel replays with no
// link.
func TestReplayLinksOriginalCall(t *testing.T) {
	m := &idem.Method{Op: "idemotel.Replay", TTL: time.Hour, Final: []idem.FinalError{{Name: "ErrDeclined", Err: errDeclined}}}
	paid := func(context.Context) (string, error) { return "paid", nil }
	everystore.Run(t, "idemotel_link_test_", func(t *testing.T, newStore everystore.NewStore) {
		// Keys are unique to the subtest: the stores share a server.
		run := rand.Text() // and to this run: Redis keeps records across runs
		key := func(name string) string { return t.Name() + "/" + name + "/" + run }
		t.Run("same executor", func(t *testing.T) {
			tr := newTracer()
			ex := tr.executor(newStore(t))
			k := key("a")
			if _, err := do(t.Context(), ex, m, k, "p", paid); err != nil {
				t.Fatal(err)
			}
			first := tr.last(t, idemotel.OutcomeExecuted)
			noLinks(t, first, "the first call")
			if v, err := do(t.Context(), ex, m, k, "p", mustNotRun); err != nil || v != "paid" {
				t.Fatalf("replay: %q, %v", v, err)
			}
			checkLink(t, tr.last(t, idemotel.OutcomeReplayed), first.SpanContext())
		})
		t.Run("another executor", func(t *testing.T) {
			st := newStore(t)
			before, after := newTracer(), newTracer()
			k := key("b")
			if _, err := do(t.Context(), before.executor(st), m, k, "p", paid); err != nil {
				t.Fatal(err)
			}
			if v, err := do(t.Context(), after.executor(st), m, k, "p", mustNotRun); err != nil || v != "paid" {
				t.Fatalf("replay after a restart: %q, %v", v, err)
			}
			checkLink(t, after.last(t, idemotel.OutcomeReplayed), before.last(t, idemotel.OutcomeExecuted).SpanContext())
		})
		t.Run("final error", func(t *testing.T) {
			tr := newTracer()
			ex := tr.executor(newStore(t))
			k := key("c")
			if _, err := do(t.Context(), ex, m, k, "p", func(context.Context) (string, error) { return "", errDeclined }); !errors.Is(err, errDeclined) {
				t.Fatalf("first: %v", err)
			}
			first := tr.last(t, idemotel.OutcomeExecuted)
			if _, err := do(t.Context(), ex, m, k, "p", mustNotRun); !errors.Is(err, errDeclined) {
				t.Fatalf("replay: %v", err)
			}
			checkLink(t, tr.last(t, idemotel.OutcomeReplayed), first.SpanContext())
		})
		t.Run("remote parent", func(t *testing.T) {
			// The first call serves a request whose trace began in another
			// service (a traceparent header): the link is in that trace.
			remote := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
				SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
				TraceFlags: trace.FlagsSampled,
				Remote:     true,
			})
			tr := newTracer()
			ex := tr.executor(newStore(t))
			k := key("d")
			if _, err := do(trace.ContextWithRemoteSpanContext(t.Context(), remote), ex, m, k, "p", paid); err != nil {
				t.Fatal(err)
			}
			first := tr.last(t, idemotel.OutcomeExecuted)
			if first.Parent().SpanID() != remote.SpanID() || first.SpanContext().TraceID() != remote.TraceID() {
				t.Fatalf("the first call's span is not the remote span's child: parent %s, trace %s", first.Parent().SpanID(), first.SpanContext().TraceID())
			}
			if _, err := do(t.Context(), ex, m, k, "p", mustNotRun); err != nil {
				t.Fatal(err)
			}
			checkLink(t, tr.last(t, idemotel.OutcomeReplayed), first.SpanContext())
		})
		t.Run("record written without idemotel", func(t *testing.T) {
			st := newStore(t)
			k := key("e")
			if _, err := do(t.Context(), idem.NewExecutor(st, idem.SingleTenant()), m, k, "p", paid); err != nil {
				t.Fatal(err)
			}
			tr := newTracer()
			if v, err := do(t.Context(), tr.executor(st), m, k, "p", mustNotRun); err != nil || v != "paid" {
				t.Fatalf("replay: %q, %v", v, err)
			}
			noLinks(t, tr.last(t, idemotel.OutcomeReplayed), "the replay of a record without metadata")
		})
	})
}

// TestReplayLinkUnsampled: an original call whose span was not sampled is
// linked with its flags (not sampled), so that a backend knows not to look
// for it; a replay under a sampled parent still records the link.
func TestReplayLinkUnsampled(t *testing.T) {
	st := memstore.New()
	m := &idem.Method{Op: "idemotel.Replay", TTL: time.Hour}
	never := newTracer(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := never.tp.Tracer("test").Start(t.Context(), "request")
	defer span.End()
	if _, err := do(ctx, never.executor(st), m, "a", "p", func(ctx context.Context) (string, error) {
		if trace.SpanContextFromContext(ctx).IsSampled() {
			return "", errors.New("sampled")
		}
		return "ok", nil
	}); err != nil {
		t.Fatal(err)
	}
	key, err := idem.NewKey("", m.Op, "a")
	if err != nil {
		t.Fatal(err)
	}
	e, err := st.Lookup(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := idem.ParseMeta(e.Outcome.Meta)
	if err != nil || !meta.Origin.IsValid() || meta.Origin.Flags != 0 || meta.Origin.TraceID != span.SpanContext().TraceID() {
		t.Fatalf("stored origin %+v, %v: want the unsampled trace %s", meta.Origin, err, span.SpanContext().TraceID())
	}
	tr := newTracer()
	if _, err := do(t.Context(), tr.executor(st), m, "a", "p", mustNotRun); err != nil {
		t.Fatal(err)
	}
	want := trace.NewSpanContext(trace.SpanContextConfig{TraceID: meta.Origin.TraceID, SpanID: meta.Origin.SpanID})
	checkLink(t, tr.last(t, idemotel.OutcomeReplayed), want)
}

// TestReplayOfUnreadableMeta: a record whose metadata this release cannot
// read (a later version, damaged bytes) replays, with no link and an event
// that says why.
func TestReplayOfUnreadableMeta(t *testing.T) {
	st := memstore.New()
	m := &idem.Method{Op: "idemotel.Replay", TTL: time.Hour}
	key, err := idem.NewKey("", m.Op, "a")
	if err != nil {
		t.Fatal(err)
	}
	var h idem.Hasher
	h.String("p") // as do hashes the payload
	fp, err := h.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := st.Claim(t.Context(), idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 3, Lease: time.Minute, TTL: time.Hour}); err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	later := []byte{2, 1, 25, 0xAA}
	if err := st.Complete(t.Context(), key, 3, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`"ok"`), Meta: later}, time.Hour); err != nil {
		t.Fatal(err)
	}
	tr := newTracer()
	if v, err := do(t.Context(), tr.executor(st), m, "a", "p", mustNotRun); err != nil || v != "ok" {
		t.Fatalf("replay: %q, %v", v, err)
	}
	s := tr.last(t, idemotel.OutcomeReplayed)
	if len(s.Links()) != 0 {
		t.Errorf("links: %v", s.Links())
	}
	found := false
	for _, e := range s.Events() {
		if e.Name == idemotel.EventOriginUnreadable {
			found = true
			if msg := attr(e.Attributes, "exception.message"); msg != "idem: the record's metadata cannot be read: version 2 (this release reads version 1)" {
				t.Errorf("event message %q", msg)
			}
		}
	}
	if !found {
		t.Errorf("no %s event on the replay's span", idemotel.EventOriginUnreadable)
	}
}

// TestReplayLinkTieredRepair: behind a tiered store whose fast tier lost
// the record (a Redis failover, an eviction; here a fresh fast tier), the
// replay answered by the durable tier links to the original call, and so
// does the next one, answered by the fast tier that the durable tier's
// record repaired (idem.Seeder). On memstores, and on Redis in front of
// PostgreSQL when they are there.
func TestReplayLinkTieredRepair(t *testing.T) {
	run := func(t *testing.T, fast func() idem.Store, durable idem.Store) {
		m := &idem.Method{Op: "idemotel.Replay", TTL: time.Hour}
		k := "repair/" + rand.Text()
		before := newTracer()
		if _, err := do(t.Context(), before.executor(tiered.New(fast(), durable)), m, k, "p", func(context.Context) (string, error) { return "paid", nil }); err != nil {
			t.Fatal(err)
		}
		original := before.last(t, idemotel.OutcomeExecuted).SpanContext()
		after := newTracer()
		var mu sync.Mutex
		var repairs []string
		ex := after.executor(tiered.New(fast(), durable, tiered.WithObserver(func(ev tiered.Event) {
			mu.Lock()
			defer mu.Unlock()
			repairs = append(repairs, ev.Kind.String())
		})))
		for i := range 2 {
			if v, err := do(t.Context(), ex, m, k, "p", mustNotRun); err != nil || v != "paid" {
				t.Fatalf("replay %d: %q, %v", i, v, err)
			}
			checkLink(t, after.last(t, idemotel.OutcomeReplayed), original)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(repairs) != 1 || repairs[0] != "repaired" {
			t.Errorf("tiered events %v: want one repair (the first replay from the durable tier, the second from the fast)", repairs)
		}
	}
	t.Run("Memstore", func(t *testing.T) {
		run(t, func() idem.Store { return memstore.New() }, memstore.New())
	})
	t.Run("RedisPostgres", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		t.Cleanup(func() { _ = c.Close() })
		pool, table := testenv.PGStoreTable(t, "idemotel_repair_test_")
		durable := pgstore.New(pool, pgstore.WithTable(table))
		run(t, func() idem.Store {
			return redisstore.New(c, redisstore.WithPrefix("idemotel_repair_test:"+rand.Text()+":"))
		}, durable)
	})
}
