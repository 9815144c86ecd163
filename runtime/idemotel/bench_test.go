package idemotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// BenchmarkReplay measures a replayed call on memstore without the hook,
// and with it on the OpenTelemetry SDK (a manual reader, every span
// sampled and dropped by a processor-less provider): the replay of a
// record that keeps its origin (the span links to it), and of one written
// without idemotel (no link).
func BenchmarkReplay(b *testing.B) {
	m := &idem.Method{Op: "T.M", TTL: time.Hour}
	fn := func(context.Context) (string, error) { return "ok", nil }
	instrumented := func() []idem.Option {
		return []idem.Option{idemotel.Instrument(
			idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			idemotel.WithTracerProvider(sdktrace.NewTracerProvider()))}
	}
	for _, c := range []struct {
		name        string
		opts, first []idem.Option // the replaying executor's options, the first call's
	}{
		{"plain", nil, nil},
		{"instrumented", instrumented(), instrumented()},
		{"instrumented-record-without-origin", instrumented(), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			st := memstore.New()
			ex := idem.NewExecutor(st, append(c.opts, idem.SingleTenant())...)
			if _, err := do(b.Context(), idem.NewExecutor(st, append(c.first, idem.SingleTenant())...), m, "a", "p", fn); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := do(b.Context(), ex, m, "a", "p", fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
