//go:build idemmutant

package idem

import (
	"context"

	"github.com/idemgen/idemgen/internal/mutant"
)

// The constants of mutation.go are internal/mutant's flags: a difference
// makes an array index out of range, a compile error.
var _ = [1]struct{}{}[mutant.Flag(mReleaseAfterFinal)^mutant.ReleaseAfterFinal|
	mutant.Flag(mLostCompleteReplyAsLeaseLost)^mutant.LostCompleteReplyAsLeaseLost|
	mutant.Flag(mQuickCompleteGiveUp)^mutant.QuickCompleteGiveUp|
	mutant.Flag(mOutageAsRefusal)^mutant.OutageAsRefusal|
	mutant.Flag(mReleaseOutageGiveUp)^mutant.ReleaseOutageGiveUp]

// mutated reports whether ctx plants the mistake m (internal/mutant).
func mutated(ctx context.Context, m mutation) bool { return mutant.On(ctx, mutant.Flag(m)) }
