package sim

import (
	"errors"

	"github.com/idemgen/idemgen/runtime/idem"
)

func isFinal(err error) bool      { return errors.Is(err, idem.ErrFinal) }
func isMismatch(err error) bool   { return errors.Is(err, idem.ErrPayloadMismatch) }
func isInProgress(err error) bool { return errors.Is(err, idem.ErrInProgress) }
