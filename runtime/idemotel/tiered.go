package idemotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/runtime/idem"
)

// AttrTieredEvent is the kind of a tiered store's event.
const AttrTieredEvent = attribute.Key("idem.tiered.event")

// TieredObserver returns the observer function that counts a tiered store's
// events (idem.tiered.events, by idem.tiered.event: fast_error, degraded,
// recovered, repaired, fast_full; and by idem.store.operation): how often
// the fast tier failed, and when calls went to the durable tier alone. E is
// the store's event type, named by the caller so that this package imports
// no store:
//
//	obs, err := idemotel.TieredObserver[tiered.Event](idemotel.WithStoreName("tiered"))
//	st := tiered.New(fast, durable, tiered.WithObserver(obs))
//
// It returns an error if the instrument cannot be created.
func TieredObserver[E idem.StoreEvent](opts ...Option) (func(E), error) {
	cfg := newConfig(opts)
	events, err := cfg.mp.Meter(ScopeName).Int64Counter("idem.tiered.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events of a tiered store's fast tier: errors, degradation, recovery, repairs."))
	if err != nil {
		return nil, fmt.Errorf("idemotel: tiered observer: %w", err)
	}
	base := cfg.storeAttrs()
	return func(ev E) {
		attrs := append(base[:len(base):len(base)], AttrStoreOperation.String(ev.StoreOperation()), AttrTieredEvent.String(ev.StoreEventName()))
		events.Add(context.Background(), 1, metric.WithAttributes(attrs...))
	}, nil
}
