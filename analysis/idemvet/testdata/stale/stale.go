// Package stale has an annotation changed since idem_gen.go was generated.
package stale

import "context"

// Mailer sends mail.
type Mailer struct{}

// Send sends once per to.
//
//idem:key=to ttl=3h // want `idem_gen\.go is stale: idemgen would write it differently`
func (m *Mailer) Send(ctx context.Context, to string) error { return nil } // want Send:`annotated\(IdempotentMailer\)`
