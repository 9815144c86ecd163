package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// clock is an idem.Clock in virtual time: Sleep advances it at once.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// link is a real memstore behind a network link whose Claims fail while
// down is set.
type link struct {
	*memstore.Store
	down bool
}

var errLink = errors.New("connection reset by peer")

func (l *link) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if l.down {
		return idem.Claim{}, errLink
	}
	return l.Store.Claim(ctx, req)
}

// telemetry is an SDK with in-memory readers.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	opts   []idemotel.Option
}

func newTelemetry() *telemetry {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	return &telemetry{
		reader: reader,
		spans:  spans,
		opts: []idemotel.Option{
			idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			idemotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))),
			idemotel.WithStoreName("memstore"),
		},
	}
}

func attrText(set attribute.Set) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// points returns every metric point as a sorted line "name{attrs} value"
// (histograms: count and sum).
func (tm *telemetry) points(t *testing.T) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, attrText(p.Attributes), p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, attrText(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s count=%d sum=%.3f", m.Name, attrText(p.Attributes), p.Count, p.Sum))
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	sort.Strings(lines)
	return lines
}

// spanLines returns every span as "name<parent attrs [events] status", in
// the order they ended.
func (tm *telemetry) spanLines() []string {
	ss := tm.spans.GetSpans()
	names := map[string]string{}
	for _, s := range ss {
		names[s.SpanContext.SpanID().String()] = s.Name
	}
	var lines []string
	for _, s := range ss {
		parent := "-"
		if s.Parent.IsValid() {
			parent = names[s.Parent.SpanID().String()]
		}
		var attrs []string
		for _, kv := range s.Attributes {
			if kv.Key == idemotel.AttrKeyID {
				attrs = append(attrs, string(kv.Key)+"=<hex>")
				continue
			}
			attrs = append(attrs, string(kv.Key)+"="+kv.Value.String())
		}
		var evs []string
		for _, e := range s.Events {
			ev := e.Name
			for _, kv := range e.Attributes {
				ev += " " + string(kv.Key) + "=" + kv.Value.String()
			}
			evs = append(evs, ev)
		}
		line := fmt.Sprintf("%s<%s {%s} [%s] %s %v", s.Name, parent, strings.Join(attrs, ","), strings.Join(evs, "; "),
			s.Status.Code, s.EndTime.Sub(s.StartTime))
		lines = append(lines, line)
	}
	return lines
}

func do(ctx context.Context, ex *idem.Executor, m *idem.Method, id, payload string, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(payload)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

// TestScriptedSequence runs a first call, its replay, a conflict, a
// takeover of a lapsed claim, a store error and a missing key, on a virtual
// clock, and checks every metric point and span exactly.
func TestScriptedSequence(t *testing.T) {
	tm := newTelemetry()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := &link{Store: memstore.New(memstore.WithClock(clk.Now))}
	ex := idem.NewExecutor(st, idem.WithClock(clk), idemotel.Instrument(tm.opts...), idem.SingleTenant())
	m := &idem.Method{Op: "Billing.Pay", TTL: time.Hour, Lease: 10 * time.Second}
	ctx := t.Context()
	runs := 0
	pay := func(context.Context) (string, error) {
		runs++
		clk.Advance(30 * time.Millisecond)
		return "paid", nil
	}

	// 1. The first call executes.
	v, err := do(ctx, ex, m, "a", "p1", pay)
	if err != nil || v != "paid" {
		t.Fatalf("first: %q, %v", v, err)
	}
	// 2. Its retry replays.
	if v, err := do(ctx, ex, m, "a", "p1", pay); err != nil || v != "paid" {
		t.Fatalf("replay: %q, %v", v, err)
	}
	// 3. The key with another payload conflicts.
	if _, err := do(ctx, ex, m, "a", "p2", pay); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("conflict: %v", err)
	}
	// 4. A claim whose worker died is taken over once its lease lapsed.
	var k idem.KeyParts
	k.String("id", "b")
	key, err := k.Key("", m.Op)
	if err != nil {
		t.Fatal(err)
	}
	var h idem.Hasher
	h.String("p1")
	fp, err := h.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := st.Store.Claim(ctx, idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 7, Lease: time.Second, TTL: time.Hour}); err != nil || !c.Claimed {
		t.Fatalf("dead worker's claim: %+v, %v", c, err)
	}
	clk.Advance(2 * time.Second)
	if v, err := do(ctx, ex, m, "b", "p1", pay); err != nil || v != "paid" {
		t.Fatalf("takeover: %q, %v", v, err)
	}
	// 5. The store cannot be reached: two retries, then a store error.
	st.down = true
	if _, err := do(ctx, ex, m, "c", "p1", pay); !errors.Is(err, errLink) {
		t.Fatalf("store error: %v", err)
	}
	st.down = false
	// 6. An empty key part.
	if _, err := do(ctx, ex, m, "", "p1", pay); !errors.Is(err, idem.ErrMissingKey) {
		t.Fatalf("missing key: %v", err)
	}
	if runs != 2 {
		t.Fatalf("the method ran %d times, want 2", runs)
	}

	const op, store = "idem.op=Billing.Pay", "idem.store.name=memstore"
	want := []string{
		"idem.call.duration{" + op + ",idem.outcome=conflict," + store + "} count=1 sum=0.000",
		"idem.call.duration{" + op + ",idem.outcome=executed," + store + "} count=1 sum=0.030",
		"idem.call.duration{" + op + ",idem.outcome=missing_key," + store + "} count=1 sum=0.000",
		"idem.call.duration{" + op + ",idem.outcome=replayed," + store + "} count=1 sum=0.000",
		"idem.call.duration{" + op + ",idem.outcome=store_error," + store + "} count=1 sum=0.050",
		"idem.call.duration{" + op + ",idem.outcome=taken_over," + store + "} count=1 sum=0.030",
		"idem.calls{" + op + ",idem.outcome=conflict," + store + "} 1",
		"idem.calls{" + op + ",idem.outcome=executed," + store + "} 1",
		"idem.calls{" + op + ",idem.outcome=missing_key," + store + "} 1",
		"idem.calls{" + op + ",idem.outcome=replayed," + store + "} 1",
		"idem.calls{" + op + ",idem.outcome=store_error," + store + "} 1",
		"idem.calls{" + op + ",idem.outcome=taken_over," + store + "} 1",
		"idem.claims.active{" + op + "," + store + "} 0",
		"idem.events{idem.event=claimed," + op + "," + store + "} 1",
		"idem.events{idem.event=completed," + op + "," + store + "} 2",
		"idem.events{idem.event=conflict," + op + "," + store + "} 1",
		"idem.events{idem.event=replayed," + op + "," + store + "} 1",
		"idem.events{idem.event=store_error," + op + "," + store + "} 1",
		"idem.events{idem.event=store_retry," + op + "," + store + "} 2",
		"idem.events{idem.event=taken_over," + op + "," + store + "} 1",
		"idem.method.duration{" + op + "," + store + "} count=2 sum=0.060",
		"idem.store.operation.duration{error.type=_OTHER," + op + "," + store + ",idem.store.operation=claim} count=3 sum=0.000",
		"idem.store.operation.duration{" + op + "," + store + ",idem.store.operation=claim} count=4 sum=0.000",
		"idem.store.operation.duration{" + op + "," + store + ",idem.store.operation=complete} count=2 sum=0.000",
		"idem.store.operation.duration{" + op + "," + store + ",idem.store.operation=release} count=1 sum=0.000",
	}
	if got := tm.points(t); !slices.Equal(got, want) {
		t.Errorf("metric points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	const sa = "idem.op=Billing.Pay,idem.store.name=memstore"
	wantSpans := []string{
		// 1. first call
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim} [] Unset 0s",
		"idem.method<idem.Do {" + sa + "} [] Unset 30ms",
		"idem.store.complete<idem.Do {" + sa + ",idem.store.operation=complete} [] Unset 0s",
		"idem.Do<- {" + sa + ",idem.key.id=<hex>,idem.outcome=executed,idem.replayed=false} [claimed; completed] Unset 30ms",
		// 2. replay
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim} [] Unset 0s",
		"idem.Do<- {" + sa + ",idem.key.id=<hex>,idem.outcome=replayed,idem.replayed=true} [replayed] Unset 0s",
		// 3. conflict
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim} [] Unset 0s",
		"idem.Do<- {" + sa + ",idem.key.id=<hex>,idem.outcome=conflict,idem.replayed=false} [conflict] Unset 0s",
		// 4. takeover
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim} [] Unset 0s",
		"idem.method<idem.Do {" + sa + "} [] Unset 30ms",
		"idem.store.complete<idem.Do {" + sa + ",idem.store.operation=complete} [] Unset 0s",
		"idem.Do<- {" + sa + ",idem.key.id=<hex>,idem.outcome=taken_over,idem.replayed=false} [taken_over; completed] Unset 30ms",
		// 5. store error: three claims 10ms and 40ms apart, the
		// abandoned claim released, best effort
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim,error.type=_OTHER} [] Error 0s",
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim,error.type=_OTHER} [] Error 0s",
		"idem.store.claim<idem.Do {" + sa + ",idem.store.operation=claim,error.type=_OTHER} [] Error 0s",
		"idem.store.release<idem.Do {" + sa + ",idem.store.operation=release} [] Unset 0s",
		"idem.Do<- {" + sa + ",idem.key.id=<hex>,idem.outcome=store_error,idem.replayed=false} [store_retry error.type=_OTHER; store_retry error.type=_OTHER; store_error error.type=_OTHER] Error 50ms",
		// 6. missing key: no key, no event
		"idem.Do<- {" + sa + ",idem.outcome=missing_key,idem.replayed=false} [] Unset 0s",
	}
	if got := tm.spanLines(); !slices.Equal(got, wantSpans) {
		t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantSpans, "\n"))
	}
}
