package main

import (
	"io"
	"testing"
)

// TestLayers: each duplicate is caught by the layer the example says, and
// the service charges once per invoice: the edge catches the retries of a
// lost response (the service is not called again, a tip included) and a
// key reused for another invoice; the business layer catches two keys for
// one invoice, a retry after the gateway lost its record, and the invoice
// charged again with another amount.
func TestLayers(t *testing.T) {
	outcomes, err := run(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	type resp struct {
		status   int
		replayed bool
	}
	want := []struct {
		charges, tips int
		responses     []resp
	}{
		{1, 0, []resp{{201, true}}},
		{0, 1, []resp{{201, true}}},
		{0, 0, []resp{{422, false}}},
		{1, 0, []resp{{201, false}, {201, false}}},
		{1, 0, []resp{{201, false}}},
		{0, 0, []resp{{422, false}}},
	}
	if len(outcomes) != len(want) {
		t.Fatalf("%d scenarios, want %d", len(outcomes), len(want))
	}
	for i, w := range want {
		o := outcomes[i]
		if o.charges != w.charges || o.tips != w.tips || len(o.responses) != len(w.responses) {
			t.Errorf("%s: %d charges, %d tips, %d responses; want %d, %d, %d", o.name, o.charges, o.tips, len(o.responses), w.charges, w.tips, len(w.responses))
			continue
		}
		for j, r := range w.responses {
			if got := o.responses[j]; got.status != r.status || got.replayed != r.replayed {
				t.Errorf("%s: response %d is %d (replayed %v), want %d (replayed %v): %s", o.name, j, got.status, got.replayed, r.status, r.replayed, got.body)
			}
		}
	}
	// The second key for invoice 4 got the first key's charge.
	if a, b := outcomes[3].responses[0].body, outcomes[3].responses[1].body; a != b {
		t.Errorf("two keys for one invoice: %s and %s, want one charge", a, b)
	}
}
