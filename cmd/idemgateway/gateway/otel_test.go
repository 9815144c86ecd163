package gateway

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemotel"
)

// TestOTel: the gateway's executor reports through idemotel: the calls by
// outcome (executed, then replayed) with the store's name, and a span per
// call.
func TestOTel(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	d := deps{
		meters:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	}
	b := newChargeBackend(t)
	g := startGateway(t, d, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant")
	key := idemhttp.GenerateKey()
	mustPost(t, g.url(""), key, `{}`)
	mustPost(t, g.url(""), key, `{}`)
	b.wantCharges(t, 1)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "idem.calls" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := p.Attributes.Value(idemotel.AttrOutcome)
				store, _ := p.Attributes.Value(idemotel.AttrStore)
				if store.AsString() != "memory" {
					t.Errorf("store name %q, want memory", store.AsString())
				}
				outcomes[outcome.AsString()] += p.Value
			}
		}
	}
	if outcomes[idemotel.OutcomeExecuted] != 1 || outcomes[idemotel.OutcomeReplayed] != 1 {
		t.Fatalf("idem.calls by outcome %v, want one executed and one replayed", outcomes)
	}
	if len(spans.Ended()) < 2 {
		t.Fatalf("%d spans ended, want one per call at least", len(spans.Ended()))
	}
}
