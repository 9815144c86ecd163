package sim

import "testing"

func BenchmarkRun(b *testing.B) {
	seed := uint64(1)
	r := NewRunner()
	defer r.Close()
	for b.Loop() {
		r.Run(seed, Options{Store: StoreKind(1 + seed%2)})
		seed++
	}
}
