package main

import (
	"bytes"
	"testing"
)

// TestStories runs the demo over real gRPC on loopback TCP and checks that
// B charged every order once with idemgrpc, and twice without it when its
// response was lost.
func TestStories(t *testing.T) {
	var out bytes.Buffer
	counts, err := run(t.Context(), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{storyLostBA: 1, storyAFails: 1, storyLostAC: 1, storyNoIdemgrpc: 2}
	for s, w := range want {
		if counts[s] != w {
			t.Errorf("%s: %d charges, want %d", s, counts[s], w)
		}
	}
}
