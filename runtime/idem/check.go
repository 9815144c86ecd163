package idem

import (
	"errors"
	"fmt"
	"time"
)

// CheckKey reports whether k's tenant and operation fit MaxTenantLen and
// MaxOpLen; the error wraps ErrTooLarge. Stores call it (through
// CheckClaim, or for a Seed) before anything else, and wrap its error with
// their own prefix ("store: op <key hex>: ...").
func CheckKey(k Key) error {
	if n := len(k.Tenant); n > MaxTenantLen {
		return fmt.Errorf("tenant of %d bytes, more than %d: %w", n, MaxTenantLen, ErrTooLarge)
	}
	if n := len(k.Op); n > MaxOpLen {
		return fmt.Errorf("operation of %d bytes, more than %d: %w", n, MaxOpLen, ErrTooLarge)
	}
	return nil
}

// CheckClaim reports whether a store may accept req: a positive TTL, a
// lease within 0..TTL, and a key that CheckKey accepts (its error wraps
// ErrTooLarge). It is the validation every store shares; a store calls it
// first in Claim (and ClaimTx) and wraps its error with its own prefix.
// A store with limits of its own checks them besides.
func CheckClaim(req ClaimRequest) error {
	if req.TTL <= 0 {
		return errors.New("TTL must be positive")
	}
	if req.Lease < 0 || req.Lease > req.TTL {
		return errors.New("lease must be within 0..TTL")
	}
	return CheckKey(req.Key)
}

// OutcomeLen returns the size of out as MaxOutcomeLen bounds it: the
// lengths of its Body, ErrCode, ErrMessage and Meta.
func OutcomeLen(out *Outcome) int {
	return len(out.Body) + len(out.ErrCode) + len(out.ErrMessage) + len(out.Meta)
}

// CheckOutcome reports whether a store may store out for ttl (Complete,
// Seed): a final status (StatusSucceeded or StatusFailedFinal), a positive
// ttl, and at most MaxOutcomeLen bytes (OutcomeLen; the error then wraps
// ErrTooLarge). Stores call it before anything else and wrap its error with
// their own prefix.
func CheckOutcome(out *Outcome, ttl time.Duration) error {
	if out.Status != StatusSucceeded && out.Status != StatusFailedFinal {
		return fmt.Errorf("outcome status %v is not final", out.Status)
	}
	if ttl <= 0 {
		return errors.New("TTL must be positive")
	}
	if n := OutcomeLen(out); n > MaxOutcomeLen {
		return fmt.Errorf("outcome of %d bytes, more than %d: %w", n, MaxOutcomeLen, ErrTooLarge)
	}
	return nil
}
