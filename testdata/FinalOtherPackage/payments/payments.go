// Package payments is a dependency whose sentinel errors are final.
package payments

import "errors"

// ErrDeclined is returned when the card issuer declines.
var ErrDeclined = errors.New("payments: card declined")

// ErrFraud is returned when the charge looks fraudulent.
var ErrFraud = errors.New("payments: suspected fraud")

// Card is a payment card.
type Card struct {
	Number string
	Limit  int
}
