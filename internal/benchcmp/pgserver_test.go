package benchcmp

import (
	"bytes"
	"strings"
	"testing"
)

// The server-time table marks the lease first call's aims from the figures:
// the wrapper's claim and complete against the hand-written reserve and
// complete (≤ 1.0×), and the share of HOT updates of its table (≥ 90%); a
// run without pg_stat_statements says so and marks nothing.
func TestPGServerTableAims(t *testing.T) {
	for _, tc := range []struct {
		name          string
		wrapper, hot  float64
		want, notWant string
	}{
		{"both met", 90, 1000, "✓ ≤ 1.0× the hand-written reserve/complete; ✓ HOT", "✗"},
		{"slower", 110, 1000, "✗ ≤ 1.0× the hand-written reserve/complete; ✓ HOT", "✓ ≤"},
		{"few HOT", 90, 100, "✓ ≤ 1.0× the hand-written reserve/complete; ✗ HOT", "✓ HOT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			PGServerTable(&b, &PGServerReport{Phases: []PGServerPhase{{Name: "postgres lease/first", Calls: 1000,
				WrapperUS: tc.wrapper, FloorUS: 100, WrapperUpd: 1000, WrapperHot: int64(tc.hot), FloorUpd: 1000, FloorHot: 1000}}})
			row := rowCells(t, b.String(), "postgres lease/first")
			aims := row[len(row)-1]
			if !strings.Contains(aims, tc.want) || strings.Contains(aims, tc.notWant) {
				t.Errorf("aims %q: want %q, not %q", aims, tc.want, tc.notWant)
			}
		})
	}
	var b bytes.Buffer
	PGServerTable(&b, &PGServerReport{Skipped: "pg_stat_statements is not available"})
	if got := b.String(); !strings.HasPrefix(got, "Not measured: ") || strings.Contains(got, "✓") {
		t.Errorf("skipped report: %q", got)
	}
}
