package idemotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestDurationBuckets: the duration histograms, in seconds, have bucket
// boundaries in seconds (OpenTelemetry's semantic conventions for
// durations), so that a call of 30ms is told from one of 3s; the SDK's
// default boundaries (0, 5, 10, …, 10000) would put both in one bucket.
func TestDurationBuckets(t *testing.T) {
	tm := newTelemetry()
	clk := &clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	ex := idem.NewExecutor(memstore.New(memstore.WithClock(clk.Now)), idem.SingleTenant(), idem.WithClock(clk), idemotel.Instrument(tm.opts...))
	m := &idem.Method{Op: "buckets", TTL: time.Hour}
	for i, d := range []time.Duration{30 * time.Millisecond, 3 * time.Second} {
		if _, err := do(context.Background(), ex, m, string(rune('a'+i)), "p", func(context.Context) (string, error) {
			clk.Advance(d)
			return "ok", nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, met := range sm.Metrics {
			h, ok := met.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, p := range h.DataPoints {
				seen++
				if len(p.Bounds) == 0 || p.Bounds[0] <= 0 || p.Bounds[0] > 0.005 || p.Bounds[len(p.Bounds)-1] < 10 || p.Bounds[len(p.Bounds)-1] > 60 {
					t.Errorf("%s: bounds %v, want seconds from 0.005 to at least 10", met.Name, p.Bounds)
				}
			}
			if met.Name != "idem.method.duration" {
				continue
			}
			p := h.DataPoints[0]
			nonEmpty := 0
			for _, c := range p.BucketCounts {
				if c > 0 {
					nonEmpty++
				}
			}
			if p.Count != 2 || nonEmpty != 2 {
				t.Errorf("idem.method.duration: 30ms and 3s in %d buckets of %v (counts %v), want 2", nonEmpty, p.Bounds, p.BucketCounts)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no histogram point")
	}
}
