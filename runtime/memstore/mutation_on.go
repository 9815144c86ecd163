//go:build idemmutant

package memstore

import (
	"context"

	"github.com/idemgen/idemgen/internal/mutant"
)

// The constants of mutation.go are internal/mutant's flags: a difference
// makes an array index out of range, a compile error.
var _ = [1]struct{}{}[mutant.Flag(mCompleteWithoutFencing)^mutant.CompleteWithoutFencing|
	mutant.Flag(mTakeoverWithoutFingerprint)^mutant.TakeoverWithoutFingerprint]

// mutated reports whether ctx plants the mistake m (internal/mutant).
func mutated(ctx context.Context, m mutation) bool { return mutant.On(ctx, mutant.Flag(m)) }
