package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// failingSweep is a store's Sweep behind a link that is down.
type failingSweep struct{}

func (failingSweep) Sweep(context.Context, int) (int, error) { return 0, errLink }

// TestSweepAndSizeMetrics: a memstore's size against its bounds, and the
// sweeper's rounds and rows removed, as exact points.
func TestSweepAndSizeMetrics(t *testing.T) {
	tm := newTelemetry()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := memstore.New(memstore.WithClock(clk.Now), memstore.WithMaxRecords(100))
	ex := idem.NewExecutor(st, idem.WithClock(clk), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Second}
	for i := range 5 {
		if _, err := do(t.Context(), ex, m, fmt.Sprint(i), "p", func(context.Context) (string, error) { return "ok", nil }); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := idemotel.ObserveSize(st, 100, memstore.DefaultMaxBytes, tm.opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Unregister() }()
	bytes := st.Bytes()
	if bytes <= 0 {
		t.Fatalf("memstore holds %d bytes", bytes)
	}
	const store = "{idem.store.name=memstore}"
	size := func(records int, bytes int64) []string {
		return []string{ // sorted: '.' before '{'
			"idem.store.bytes.limit" + store + " " + fmt.Sprint(memstore.DefaultMaxBytes),
			"idem.store.bytes" + store + " " + fmt.Sprint(bytes),
			"idem.store.records.limit" + store + " 100",
			"idem.store.records" + store + " " + fmt.Sprint(records),
		}
	}
	if got, want := tm.points(t), size(5, bytes); !slices.Equal(got, want) {
		t.Errorf("before the sweep:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	observe, err := idemotel.SweepObserver(tm.opts...)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if n, err := idem.NewSweeper(st, idem.WithSweepBatch(2), idem.WithSweepObserver(observe)).Round(t.Context()); n != 5 || err != nil {
		t.Fatalf("round: %d, %v", n, err)
	}
	if _, err := idem.NewSweeper(failingSweep{}, idem.WithSweepObserver(observe)).Round(t.Context()); !errors.Is(err, errLink) {
		t.Fatalf("failing round: %v", err)
	}
	want := append(size(0, 0),
		"idem.sweeper.removed"+store+" 5",
		"idem.sweeper.rounds{error.type=_OTHER,idem.store.name=memstore} 1",
		"idem.sweeper.rounds"+store+" 1",
	)
	slices.Sort(want)
	if got := tm.points(t); !slices.Equal(got, want) {
		t.Errorf("after the sweep:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestKeysStayOut: by default no span, span event or metric carries the
// key's text or the tenant (the executor's errors name a key by its ID); with
// WithKeys the span does, and metrics still do not.
func TestKeysStayOut(t *testing.T) {
	run := func(opts ...idemotel.Option) (spans, points string) {
		tm := newTelemetry()
		st := &link{Store: memstore.New(), down: true}
		ex := idem.NewExecutor(st, idem.WithTenant(func(context.Context) string { return "tenant-alice" }),
			idem.WithClock(&clock{}), idemotel.Instrument(append(tm.opts, opts...)...))
		if _, err := do(t.Context(), ex, &idem.Method{Op: "T.M", TTL: time.Minute}, "bob@example.com", "p", func(context.Context) (string, error) {
			return "ok", nil
		}); !errors.Is(err, errLink) || strings.Contains(err.Error(), "bob@example.com") {
			t.Fatalf("the store error: %v (want errLink, the key named by its ID, not its text)", err)
		}
		return strings.Join(tm.spanLines(), "\n"), strings.Join(tm.points(t), "\n")
	}
	spans, points := run()
	for _, s := range []string{"alice", "bob"} {
		if strings.Contains(spans, s) || strings.Contains(points, s) {
			t.Errorf("%q is out by default:\n%s\n%s", s, spans, points)
		}
	}
	spans, points = run(idemotel.WithKeys())
	for _, s := range []string{"idem.tenant=tenant-alice", "idem.key=bob@example.com", "exception.message="} {
		if !strings.Contains(spans, s) {
			t.Errorf("WithKeys: the spans lack %q:\n%s", s, spans)
		}
	}
	if strings.Contains(points, "alice") || strings.Contains(points, "bob") {
		t.Errorf("WithKeys puts keys on metrics:\n%s", points)
	}
}

// TestTieredEvents: a tiered store whose fast tier is down counts its
// errors and degradation.
func TestTieredEvents(t *testing.T) {
	tm := newTelemetry()
	observe, err := idemotel.TieredObserver[tiered.Event](tm.opts...)
	if err != nil {
		t.Fatal(err)
	}
	fast := &link{Store: memstore.New(), down: true}
	st := tiered.New(fast, memstore.New(), tiered.WithObserver(observe), tiered.WithInlineFastCalls(), tiered.WithCooldown(time.Hour))
	ex := idem.NewExecutor(st, idem.SingleTenant())
	for i := range 2 {
		if _, err := do(t.Context(), ex, &idem.Method{Op: "T.M", TTL: time.Minute}, fmt.Sprint(i), "p", func(context.Context) (string, error) {
			return "ok", nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"idem.tiered.events{idem.store.name=memstore,idem.store.operation=claim,idem.tiered.event=degraded} 1",
		"idem.tiered.events{idem.store.name=memstore,idem.store.operation=claim,idem.tiered.event=fast_error} 1",
	}
	if got := tm.points(t); !slices.Equal(got, want) {
		t.Errorf("points:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
