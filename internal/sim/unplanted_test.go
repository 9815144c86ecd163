//go:build !idemmutant

package sim

import (
	"testing"

	"github.com/idemgen/idemgen/internal/mutant"
)

// TestMutationsNotPlanted: in a build without the tag idemmutant (every
// shipped build), switching on every known mistake changes nothing: the
// seeds that find each one with the tag (TestFindsKnownMistakes) pass.
func TestMutationsNotPlanted(t *testing.T) {
	if mutant.Planted {
		t.Fatal("mutant.Planted without the tag idemmutant")
	}
	var all mutant.Flag
	for _, m := range mutant.All() {
		all |= m
	}
	for _, k := range []StoreKind{Durable, Losing} {
		for seed := uint64(1); seed <= 200; seed++ {
			if r := Run(seed, Options{Store: k, Mutations: all}); !r.OK() {
				t.Fatalf("a mutation is reachable without the tag:\n%s", r.Report())
			}
		}
	}
}
