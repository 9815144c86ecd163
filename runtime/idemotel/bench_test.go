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
// sampled and dropped by a processor-less provider).
func BenchmarkReplay(b *testing.B) {
	m := &idem.Method{Op: "T.M", TTL: time.Hour}
	fn := func(context.Context) (string, error) { return "ok", nil }
	for _, c := range []struct {
		name string
		opts []idem.Option
	}{
		{"plain", nil},
		{"instrumented", []idem.Option{idemotel.Instrument(
			idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
			idemotel.WithTracerProvider(sdktrace.NewTracerProvider()))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ex := idem.NewExecutor(memstore.New(), append(c.opts, idem.SingleTenant())...)
			if _, err := do(b.Context(), ex, m, "a", "p", fn); err != nil {
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
