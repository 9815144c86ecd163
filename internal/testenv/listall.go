package testenv

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ListAll pages through list from q to the last page and returns the hex
// IDs of the entries listed and the number of calls; an entry listed twice
// fails the test. each, unless nil, sees every entry.
func ListAll(t testing.TB, list func(idem.ListQuery) (idem.Page, error), q idem.ListQuery, each func(idem.Entry)) (map[string]bool, int) {
	t.Helper()
	got, calls := map[string]bool{}, 0
	for {
		calls++
		p, err := list(q)
		if err != nil {
			t.Fatalf("list (call %d): %v", calls, err)
		}
		for _, e := range p.Entries {
			if got[e.Key.Hex()] {
				t.Fatalf("%s listed twice", e.Key.Hex())
			}
			got[e.Key.Hex()] = true
			if each != nil {
				each(e)
			}
		}
		if p.Next == "" {
			return got, calls
		}
		q.Cursor = p.Next
	}
}
