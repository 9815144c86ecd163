package idem

import (
	"context"
	"testing"
)

// BenchmarkCallInfoLookup is what a call without a CallInfo pays for the
// feature: one context lookup that finds nothing, on a request's context
// (cancellable, carrying two values).
func BenchmarkCallInfoLookup(b *testing.B) {
	type k1 struct{}
	type k2 struct{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = context.WithValue(context.WithValue(ctx, k1{}, 1), k2{}, 2)
	b.ReportAllocs()
	for b.Loop() {
		if callInfoFrom(ctx) != nil {
			b.Fatal("found a CallInfo")
		}
	}
}
