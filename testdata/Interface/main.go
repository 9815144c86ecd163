// Interface: the annotated type is an interface. The wrapper embeds the
// interface value, implements the interface (the generated code asserts
// it), and passes the unannotated method through.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Mailer sends mail.
type Mailer interface {
	// Send sends one message and returns its message ID.
	//
	//idem:key=to+subject ttl=24h
	Send(ctx context.Context, to, subject, body string) (string, error)
	// Outbox lists what was sent.
	Outbox() []string
}

type smtp struct{ sent []string }

func (s *smtp) Send(ctx context.Context, to, subject, body string) (string, error) {
	s.sent = append(s.sent, to+": "+subject)
	return fmt.Sprintf("msg-%d", len(s.sent)), nil
}

func (s *smtp) Outbox() []string { return s.sent }

func main() {
	ctx := context.Background()
	var m Mailer = NewIdempotentMailer(&smtp{}, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	for range 3 {
		id, err := m.Send(ctx, "ann@example.com", "Your receipt", "Thanks!")
		fmt.Println("send receipt:", id, err)
	}
	id, err := m.Send(ctx, "bob@example.com", "Your receipt", "Thanks!")
	fmt.Println("send to bob:", id, err)
	fmt.Println("outbox:", m.Outbox())
}
