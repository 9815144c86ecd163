package idemotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/runtime/idem"
)

// SweepObserver returns the idem.WithSweepObserver function that counts a
// Sweeper's rounds (idem.sweeper.rounds, with error.type when a round
// failed) and the expired records it removed (idem.sweeper.removed). Give
// it the same WithStoreName as the store's executor. It returns an error if
// an instrument cannot be created.
func SweepObserver(opts ...Option) (func(idem.SweepEvent), error) {
	cfg := newConfig(opts)
	m := cfg.mp.Meter(ScopeName)
	removed, err1 := m.Int64Counter("idem.sweeper.removed", metric.WithUnit("{record}"),
		metric.WithDescription("Expired records the sweeper removed."))
	rounds, err2 := m.Int64Counter("idem.sweeper.rounds", metric.WithUnit("{round}"),
		metric.WithDescription("Sweeper rounds, with error.type when one failed."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("idemotel: sweep observer: %w", err)
	}
	attrs := cfg.storeAttrs()
	return func(ev idem.SweepEvent) {
		ctx := context.Background()
		removed.Add(ctx, int64(ev.Removed), metric.WithAttributes(attrs...))
		a := attrs
		if ev.Err != nil {
			a = append(a[:len(a):len(a)], AttrErrorType.String(errorType(ev.Err)))
		}
		rounds.Add(ctx, 1, metric.WithAttributes(a...))
	}, nil
}

// Sizer is a store that reports its size, as memstore does.
type Sizer interface {
	// Len returns the number of records held.
	Len() int
	// Bytes returns the size of the records held.
	Bytes() int64
}

// ObserveSize reports s's size against its bounds as gauges:
// idem.store.records and idem.store.bytes, and, when maxRecords or maxBytes
// is positive (memstore's WithMaxRecords, WithMaxBytes, or their defaults),
// idem.store.records.limit and idem.store.bytes.limit. Unregister the
// returned registration to stop.
func ObserveSize(s Sizer, maxRecords int, maxBytes int64, opts ...Option) (metric.Registration, error) {
	cfg := newConfig(opts)
	m := cfg.mp.Meter(ScopeName)
	records, err1 := m.Int64ObservableGauge("idem.store.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records the store holds, expired ones not yet removed included."))
	bytes, err2 := m.Int64ObservableGauge("idem.store.bytes", metric.WithUnit("By"),
		metric.WithDescription("Size of the records the store holds, as its bound counts it."))
	recordsLimit, err3 := m.Int64ObservableGauge("idem.store.records.limit", metric.WithUnit("{record}"),
		metric.WithDescription("The most records the store holds."))
	bytesLimit, err4 := m.Int64ObservableGauge("idem.store.bytes.limit", metric.WithUnit("By"),
		metric.WithDescription("The most bytes of records the store holds."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("idemotel: observe size: %w", err)
	}
	attrs := metric.WithAttributes(cfg.storeAttrs()...)
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(records, int64(s.Len()), attrs)
		o.ObserveInt64(bytes, s.Bytes(), attrs)
		if maxRecords > 0 {
			o.ObserveInt64(recordsLimit, int64(maxRecords), attrs)
		}
		if maxBytes > 0 {
			o.ObserveInt64(bytesLimit, maxBytes, attrs)
		}
		return nil
	}, records, bytes, recordsLimit, bytesLimit)
	if err != nil {
		return nil, fmt.Errorf("idemotel: observe size: %w", err)
	}
	return reg, nil
}
