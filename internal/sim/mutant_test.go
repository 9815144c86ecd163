//go:build idemmutant

package sim

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/mutant"
)

// TestFindsKnownMistakes switches on each known mistake in the real code
// (internal/mutant) and shows that the simulator kills it within a bounded
// number of seeds, on either store, by a failing check, printing the first
// seed and its trace. A mutation is never killed by a stuck schedule (a
// hang, a livelock, a goroutine the simulator waited for in vain): every
// one of the bounded seeds ends, and none is reported stuck.
func TestFindsKnownMistakes(t *testing.T) {
	const within = 200
	for _, m := range mutant.All() {
		for _, k := range []StoreKind{Durable, Losing} {
			t.Run(m.String()+"/"+k.String(), func(t *testing.T) {
				found := uint64(0)
				for seed := uint64(1); seed <= within; seed++ {
					r := Run(seed, Options{Store: k, Mutations: m})
					if r.OK() {
						continue
					}
					if v := r.Violations[0]; strings.Contains(v, "stuck: ") {
						t.Fatalf("%v: seed %d is stuck, not killed by a check: %s", m, seed, v)
					}
					if found != 0 {
						continue
					}
					found = seed
					r = Run(seed, Options{Store: k, Mutations: m, Trace: true})
					if r.OK() {
						t.Fatalf("seed %d failed without a trace and passed with one", seed)
					}
					t.Logf("found at seed %d:\n%s", seed, r.Report())
				}
				if found == 0 {
					t.Fatalf("%v not found within %d seeds", m, within)
				}
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
