package benchcmp

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// recorder is a variant that records the order of its calls in a shared log.
func recorder(name string, mu *sync.Mutex, log *[]string) Variant {
	return Variant{Name: name, Op: func(int) error {
		mu.Lock()
		*log = append(*log, name)
		mu.Unlock()
		return nil
	}}
}

// With 1 caller and Block 0, Run interleaves the variants call by call
// within every round (never a round of one, then a round of the other), and
// every variant makes the same number of calls per round.
func TestRunInterleavesCallByCall(t *testing.T) {
	var mu sync.Mutex
	var log []string
	g := Group{Name: "g", Callers: 1, Variants: []Variant{recorder("a", &mu, &log), recorder("b", &mu, &log), recorder("c", &mu, &log)}}
	const rounds, ops = 3, 8
	res, err := Run(g, Config{Rounds: rounds, MinOps: ops, MaxOps: ops})
	if err != nil {
		t.Fatal(err)
	}
	if res.OpsCell != ops || res.Block != 1 || res.Rounds != rounds {
		t.Fatalf("ops %d, block %d, rounds %d", res.OpsCell, res.Block, res.Rounds)
	}
	tail := log[len(log)-rounds*ops*3:]
	for i := 0; i < len(tail); i += 3 {
		step := strings.Join(tail[i:i+3], "")
		if !strings.Contains(step, "a") || !strings.Contains(step, "b") || !strings.Contains(step, "c") {
			t.Fatalf("step %d ran %q: want each variant once", i/3, step)
		}
	}
	// The variant that goes first rotates from call to call.
	if tail[0] == tail[3] {
		t.Errorf("steps 0 and 1 both start with %q", tail[0])
	}
	if len(res.Ratio) != 3 || len(res.Spread) != 3 || !res.Measured() {
		t.Errorf("result %+v", res)
	}
}

// With several callers, blocks hold at least one call per caller; the
// rounds still alternate the variants block by block.
func TestRunConcurrentBlocks(t *testing.T) {
	var mu sync.Mutex
	var log []string
	g := Group{Name: "g", Callers: 4, Variants: []Variant{recorder("a", &mu, &log), recorder("b", &mu, &log)}}
	res, err := Run(g, Config{Rounds: 1, MinOps: 16, MaxOps: 16})
	if err != nil {
		t.Fatal(err)
	}
	if res.Block != 4 || res.OpsCell != 16 {
		t.Fatalf("block %d, ops %d", res.Block, res.OpsCell)
	}
	tail := log[len(log)-32:]
	for i := 0; i < len(tail); i += 4 {
		for _, x := range tail[i+1 : i+4] {
			if x != tail[i] {
				t.Fatalf("block at %d mixes variants: %v", i, tail[i:i+4])
			}
		}
	}
}

// Run refuses what it cannot measure, and reports a failing call.
func TestRunRefuses(t *testing.T) {
	ok := Variant{Name: "ok", Op: func(int) error { return nil }}
	boom := errors.New("boom")
	bad := Variant{Name: "bad", Op: func(int) error { return boom }}
	for _, tc := range []struct {
		name string
		g    Group
		cfg  Config
		want string
	}{
		{"no rounds", Group{Name: "g", Callers: 1, Variants: []Variant{ok, ok}}, Config{Rounds: 0, MinOps: 1, MaxOps: 1}, "0 rounds"},
		{"no floor", Group{Name: "g", Callers: 1, Variants: []Variant{ok}}, Config{Rounds: 1, MinOps: 1, MaxOps: 1}, "1 variants"},
		{"failing call", Group{Name: "g", Callers: 1, Variants: []Variant{ok, bad}}, Config{Rounds: 1, MinOps: 1, MaxOps: 1}, "bad: call 0: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(tc.g, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if res.Measured() {
				t.Errorf("a refused comparison counts as measured: %+v", res)
			}
		})
	}
}
