package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/examples/consumer/points"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Door is the consumer's door: it turns one JetStream delivery into one
// call of the handler (a generated wrapper) and acknowledges it by the rule
// of docs/CONSUMERS.md. Use Deliver in a fetch loop, or MessageHandler as
// the callback of jetstream.Consumer.Consume.
type Door struct {
	// Handle is the business method, wrapped: points.IdempotentService's
	// HandleShipment.
	Handle func(ctx context.Context, msg points.Message) error
	// Tenant names the tenant of a delivery (from a header the producer
	// set, say); nil for a single-tenant consumer. The tenant is put in the
	// handler's context (idem.ContextWithTenant), so that the wrapper scopes
	// its records by it, on a SingleTenant executor too. A delivery it
	// names no tenant for ("") is terminated, never handled in a shared key
	// space.
	Tenant func(jetstream.Msg) string
	// NakDelay is the redelivery delay after a transient error or a panic
	// (default 1s); after an in-progress answer the delay is the larger of
	// it and the answer's RetryAfter.
	NakDelay time.Duration
	// Log receives a line per delivery not acked (default slog.Default()).
	Log *slog.Logger
}

// Verdict says how the door acknowledged a delivery.
type Verdict string

// The verdicts.
const (
	// Acked: the outcome is stored (or was already): done.
	Acked Verdict = "ack"
	// Naked: redeliver after a delay; the key was released (a transient
	// error, a panic) or is in flight elsewhere (idem.ErrInProgress).
	Naked Verdict = "nak"
	// Termed: never redeliver; every redelivery would get the same answer
	// for the record's TTL (a final error, idem.ErrPayloadMismatch), or the
	// delivery cannot be handled at all (undecodable, no tenant). Dead-letter
	// it; redrive it only as docs/CONSUMERS.md says.
	Termed Verdict = "term"
)

// ErrPanicked is the reason a delivery whose handler panicked was naked:
// the panic was recovered (it would otherwise kill the consumer's callback
// goroutine and the process), the executor released the key, and the
// redelivery runs the handler again; MaxDeliver bounds a message that
// always panics, which then goes to the dead letter.
var ErrPanicked = errors.New("consumer: the handler panicked")

// MessageHandler returns Deliver as a jetstream.MessageHandler, for
// Consumer.Consume: a panic in the handler never leaves the callback.
func (d *Door) MessageHandler(ctx context.Context) jetstream.MessageHandler {
	return func(m jetstream.Msg) { _, _ = d.Deliver(ctx, m) }
}

// Deliver handles one delivery and acknowledges it: it returns the verdict
// and the handler's error (ErrPanicked for a panic), or the error of the
// acknowledgement itself.
func (d *Door) Deliver(ctx context.Context, m jetstream.Msg) (Verdict, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	delay := d.NakDelay
	if delay <= 0 {
		delay = time.Second
	}
	var msg points.Message
	if err := json.Unmarshal(m.Data(), &msg); err != nil {
		return d.ack(ctx, log, m, Termed, 0, fmt.Errorf("decode: %w", err))
	}
	if d.Tenant != nil {
		t := d.Tenant(m)
		if t == "" {
			return d.ack(ctx, log, m, Termed, 0, fmt.Errorf("message %s: %w: the delivery names none", msg.ID, idem.ErrMissingTenant))
		}
		ctx = idem.ContextWithTenant(ctx, t)
	}
	err := d.call(ctx, log, msg)
	var inProgress *idem.InProgressError
	switch {
	case err == nil:
		return d.ack(ctx, log, m, Acked, 0, nil)
	case errors.Is(err, idem.ErrFinal), errors.Is(err, idem.ErrPayloadMismatch), errors.Is(err, idem.ErrMissingKey),
		errors.Is(err, idem.ErrMissingTenant), errors.Is(err, idem.ErrTenantConflict), errors.Is(err, idem.ErrMisconfigured):
		return d.ack(ctx, log, m, Termed, 0, err)
	case errors.As(err, &inProgress):
		return d.ack(ctx, log, m, Naked, max(delay, inProgress.RetryAfter), err)
	default:
		return d.ack(ctx, log, m, Naked, delay, err)
	}
}

// call runs the handler and turns a panic into ErrPanicked, logged with its
// stack. The wrapper's executor has released the key by then (a panic
// releases it, then goes on).
func (d *Door) call(ctx context.Context, log *slog.Logger, msg points.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.LogAttrs(ctx, slog.LevelError, "consumer: handler panicked", slog.String("message", msg.ID),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("%w: %v", ErrPanicked, p)
		}
	}()
	return d.Handle(ctx, msg)
}

// ack acknowledges m by v and logs every verdict but Acked.
func (d *Door) ack(ctx context.Context, log *slog.Logger, m jetstream.Msg, v Verdict, delay time.Duration, cause error) (Verdict, error) {
	var err error
	switch v {
	case Acked:
		err = m.Ack()
	case Naked:
		err = m.NakWithDelay(delay)
	case Termed:
		err = m.TermWithReason(cause.Error())
	}
	if v != Acked {
		log.LogAttrs(ctx, slog.LevelWarn, "consumer: delivery not acked", slog.String("verdict", string(v)),
			slog.String("subject", m.Subject()), slog.Duration("delay", delay), slog.String("error", cause.Error()))
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "consumer: acknowledgement failed", slog.String("verdict", string(v)), slog.String("error", err.Error()))
		return v, fmt.Errorf("%s: %w", v, err)
	}
	return v, cause
}
