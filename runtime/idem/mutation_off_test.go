//go:build !idemmutant

package idem

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/internal/mutant"
)

// TestNoMutationWithoutTag: in a build without the tag idemmutant, a
// context that switches on every known mistake plants none in the
// executor (the shipped build; TestShippedImportsNoMutant checks that it
// does not even import internal/mutant).
func TestNoMutationWithoutTag(t *testing.T) {
	var all mutant.Flag
	for _, m := range mutant.All() {
		all |= m
	}
	ctx := mutant.With(context.Background(), all)
	for _, m := range []mutation{mReleaseAfterFinal, mLostCompleteReplyAsLeaseLost, mQuickCompleteGiveUp, mOutageAsRefusal, mReleaseOutageGiveUp} {
		if mutated(ctx, m) {
			t.Errorf("mutation %v is planted in a build without the tag idemmutant", mutant.Flag(m))
		}
	}
	if mutant.Planted {
		t.Error("mutant.Planted in a build without the tag idemmutant")
	}
}
