package stress

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestCheckBudget: the check decides key by key, and how far it may search
// is a number of steps, not a time: the same history gets the same verdict
// and the same count of steps on every run, and a history too ambiguous
// for the budget is undecided (naming its key) rather than failed by the
// clock. Operations of unknown effect that no answer shows cost nothing
// (reductions). An illegal key is found among legal ones.
func TestCheckBudget(t *testing.T) {
	const ms = int64(time.Millisecond)
	var h []porcupine.Operation
	// Key a: 8 concurrent claims whose effect is unknown (the store went
	// away), then one that finds the first token's claim: many orders to try.
	ka := [32]byte{'a'}
	for i := range 8 {
		in := opInput{Key: ka, Text: "a", Kind: opClaim, FP: idem.Fingerprint{1}, Token: idem.Token(i + 1), Lease: time.Hour, TTL: time.Hour,
			Call: int64(i) * ms, Return: math.MaxInt64}
		h = append(h, porcupine.Operation{ClientId: i, Input: in, Output: opOutput{Unknown: true}, Call: in.Call, Return: in.Return})
	}
	in := opInput{Key: ka, Text: "a", Kind: opClaim, FP: idem.Fingerprint{1}, Token: 99, Lease: time.Hour, TTL: time.Hour, Call: 20 * ms, Return: 21 * ms}
	h = append(h, porcupine.Operation{ClientId: 9, Input: in, Call: in.Call, Return: in.Return,
		Output: opOutput{Rec: recView{Status: idem.StatusProcessing, FP: idem.Fingerprint{1}, Token: 3, LeaseLeft: time.Hour}}})
	// Key b: a claim, then a Complete that the model forbids (another token).
	kb := [32]byte{'b'}
	c := opInput{Key: kb, Text: "b", Kind: opClaim, FP: idem.Fingerprint{1}, Token: 1, Lease: time.Hour, TTL: time.Hour, Call: 0, Return: ms}
	x := opInput{Key: kb, Text: "b", Kind: opComplete, Token: 2, TTL: time.Hour, Status: idem.StatusSucceeded, Out: 7, Call: 2 * ms, Return: 3 * ms}
	illegal := append([]porcupine.Operation{
		{ClientId: 20, Input: c, Output: opOutput{Claimed: true}, Call: c.Call, Return: c.Return},
		{ClientId: 21, Input: x, Output: opOutput{}, Call: x.Call, Return: x.Return},
	}, h...)

	first, err := check(h, ModelOptions{}, StepBudget, time.Hour, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if first.Result != porcupine.Ok || first.Steps == 0 || first.Keys != 1 {
		t.Fatalf("legal history: %+v, want Ok with its steps counted", first)
	}
	again, _ := check(h, ModelOptions{}, StepBudget, time.Hour, "", "")
	if again.Steps != first.Steps {
		t.Errorf("steps %d then %d: the count is the history's, not the run's", first.Steps, again.Steps)
	}
	small, _ := check(h, ModelOptions{}, 1, time.Hour, "", "")
	if small.Result != porcupine.Unknown || small.OverBudget != "a" || small.TimedOut != "" {
		t.Errorf("a budget below the history's steps: %+v, want Unknown, over budget on key a", small)
	}
	// 40 concurrent claims of unknown effect, none ever seen: the full
	// history has 2^40 orders and effects to consider; without them it
	// takes a step or two.
	var wide []porcupine.Operation
	kc := [32]byte{'c'}
	for i := range 40 {
		in := opInput{Key: kc, Text: "c", Kind: opClaim, FP: idem.Fingerprint{1}, Token: idem.Token(100 + i), Lease: time.Hour, TTL: time.Hour,
			Call: int64(i) * ms, Return: math.MaxInt64}
		wide = append(wide, porcupine.Operation{ClientId: i, Input: in, Output: opOutput{Unknown: true}, Call: in.Call, Return: in.Return})
	}
	in = opInput{Key: kc, Text: "c", Kind: opClaim, FP: idem.Fingerprint{1}, Token: 999, Lease: time.Hour, TTL: time.Hour, Call: 50 * ms, Return: 51 * ms}
	wide = append(wide, porcupine.Operation{ClientId: 50, Input: in, Output: opOutput{Claimed: true}, Call: in.Call, Return: in.Return})
	w, _ := check(wide, ModelOptions{}, StepBudget, time.Hour, "", "")
	if w.Result != porcupine.Ok || w.Steps > 100 {
		t.Errorf("a wide history of unknown effects that no answer shows: %+v, want Ok in a few steps", w)
	}
	bad, _ := check(illegal, ModelOptions{}, StepBudget, time.Hour, "", "")
	if bad.Result != porcupine.Illegal || bad.Keys != 2 {
		t.Errorf("an illegal key among legal ones: %+v, want Illegal", bad)
	}
}
