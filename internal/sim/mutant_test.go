//go:build idemmutant

package sim

import (
	"testing"

	"github.com/idemgen/idemgen/internal/mutant"
)

// TestFindsKnownMistakes switches on each known mistake in the real code
// (internal/mutant) and shows that the simulator finds it within a bounded
// number of seeds, on either store, printing the first seed and its trace.
func TestFindsKnownMistakes(t *testing.T) {
	const within = 200
	for _, m := range mutant.All() {
		for _, k := range []StoreKind{Durable, Losing} {
			t.Run(m.String()+"/"+k.String(), func(t *testing.T) {
				for seed := uint64(1); seed <= within; seed++ {
					if r := Run(seed, Options{Store: k, Mutations: m}); !r.OK() {
						r = Run(seed, Options{Store: k, Mutations: m, Trace: true})
						if r.OK() {
							t.Fatalf("seed %d failed without a trace and passed with one", seed)
						}
						t.Logf("found at seed %d:\n%s", seed, r.Report())
						return
					}
				}
				t.Fatalf("%v not found within %d seeds", m, within)
			})
		}
	}
}

// TestMutationsPlanted: this file builds only with the tag idemmutant, and
// with it the runtime consults the mutations.
func TestMutationsPlanted(t *testing.T) {
	if !mutant.Planted {
		t.Fatal("built with idemmutant, but mutant.Planted is false")
	}
}
