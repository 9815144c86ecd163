// MethodKey: key paths that call no-argument methods, on an interface
// parameter (checked for nil) and through a method that returns a pointer
// (called once, then checked).
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Message is what a queue delivers, at least once.
type Message interface {
	ID() string
	Envelope() *Envelope
}

type Envelope struct{ Partition int }

type msg struct {
	id    string
	env   *Envelope
	calls *int
}

func (m msg) ID() string { return m.id }

func (m msg) Envelope() *Envelope {
	*m.calls++
	return m.env
}

type Consumer struct{ handled []string }

//idem:key=m.ID() ttl=7d
func (c *Consumer) Handle(ctx context.Context, m Message) (int, error) {
	c.handled = append(c.handled, m.ID())
	return len(c.handled), nil
}

//idem:key=m.Envelope().Partition+m.ID() ttl=1h hash=none
func (c *Consumer) Ack(ctx context.Context, m Message) (string, error) {
	return "acked " + m.ID(), nil
}

func main() {
	ctx := context.Background()
	c := &Consumer{}
	w := NewIdempotentConsumer(c, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	// Each delivery counts its own Envelope() calls: the fingerprint sees
	// every field of the message, so a redelivery must be equal to the
	// first delivery, counter included.
	delivered := []msg{
		{id: "m1", env: &Envelope{Partition: 3}, calls: new(int)},
		{id: "m1", env: &Envelope{Partition: 3}, calls: new(int)}, // redelivered
		{id: "m2", env: &Envelope{Partition: 3}, calls: new(int)},
	}
	for _, m := range delivered {
		n, err := w.Handle(ctx, m)
		fmt.Println("handle", m.ID(), "->", n, err)
		s, err := w.Ack(ctx, m)
		fmt.Println("ack", m.ID(), "->", s, err)
	}
	calls := 0
	for _, m := range delivered {
		calls += *m.calls
	}
	fmt.Println("Envelope() calls (one per Ack):", calls)
	_, err := w.Handle(ctx, nil)
	fmt.Println("nil message:", errors.Is(err, idem.ErrMissingKey))
	_, err = w.Ack(ctx, msg{id: "m3", calls: &calls})
	fmt.Println("nil envelope:", errors.Is(err, idem.ErrMissingKey), err)
	fmt.Println("handled:", c.handled)
}
