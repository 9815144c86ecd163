package benchcmp

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// measuredWarm is a warm generator comparison as Run returns it.
func measuredWarm(idem, load float64) GroupResult {
	return GroupResult{Name: "generator", Callers: 1, Rounds: 3, OpsCell: 1, Block: 1,
		Variants:    []VariantResult{{Name: "generate.Generate", NsOp: idem}, {Name: "packages.Load", NsOp: load}},
		Ratio:       []float64{1, idem / load},
		DeltaNs:     []float64{0, idem - load},
		DeltaAllocs: []float64{0, 0},
		Spread:      [][2]float64{{1, 1}, {idem / load, idem / load}},
	}
}

// cellsOf returns the cells of the table row that starts with "| first |".
func rowCells(t *testing.T, table, first string) []string {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| "+first+" |") {
			return strings.Split(strings.Trim(line, "|"), "|")
		}
	}
	t.Fatalf("no row %q in\n%s", first, table)
	return nil
}

// A side of the generator table the harness did not measure (-cold-rounds 0,
// -warm-rounds 0) says "not measured" and never carries a check mark: it used
// to print "✓ 0.00× (aim ≤ 1.1×)".
func TestGenTableUnmeasuredSidesCheckNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		r          GenResult
		warm, cold bool // measured
	}{
		{"no cold pairs", GenResult{Methods: 10, Lines: 300, Warm: measuredWarm(2e6, 1e6)}, true, false},
		{"no warm pairs", GenResult{Methods: 10, Lines: 300, ColdIdemgen: []time.Duration{time.Second}, ColdList: []time.Duration{time.Second}, ColdRatio: 1}, false, true},
		{"nothing", GenResult{Methods: 10, Lines: 300}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			GenTable(&b, []GenResult{tc.r})
			cells := rowCells(t, b.String(), "10")
			if len(cells) != 8 {
				t.Fatalf("%d cells in %q", len(cells), cells)
			}
			for i, side := range []struct {
				measured bool
				cols     []int
			}{{tc.warm, []int{2, 3, 4}}, {tc.cold, []int{5, 6, 7}}} {
				for _, c := range side.cols {
					got := strings.TrimSpace(cells[c])
					if side.measured == (got == notMeasured) {
						t.Errorf("side %d, column %d: %q (measured: %v)", i, c, got, side.measured)
					}
					if !side.measured && strings.ContainsAny(got, "✓✗") {
						t.Errorf("side %d, column %d: %q checks an unmeasured figure", i, c, got)
					}
				}
			}
			if tc.warm && !strings.Contains(cells[4], "✗ 2.00×") {
				t.Errorf("warm ratio %q: want ✗ 2.00× against the 1.5× aim", cells[4])
			}
		})
	}
}

// The warm aim depends on the package's size (issue 20): 1.5× up to 100
// methods, 3.5× at 1,000.
func TestGenTableWarmAimBySize(t *testing.T) {
	for _, tc := range []struct {
		methods int
		ratio   float64
		want    string
	}{
		{10, 1.4, "✓ 1.40×"}, {100, 1.6, "✗ 1.60×"}, {100, 1.5, "✓ 1.50×"},
		{1000, 3.4, "✓ 3.40×"}, {1000, 3.6, "✗ 3.60×"},
	} {
		var b bytes.Buffer
		GenTable(&b, []GenResult{{Methods: tc.methods, Lines: 300, Warm: measuredWarm(tc.ratio*1e6, 1e6)}})
		cells := rowCells(t, b.String(), strconv.Itoa(tc.methods))
		if got := strings.TrimSpace(cells[4]); !strings.HasPrefix(got, tc.want) || !strings.Contains(got, fmt.Sprintf("(aim ≤ %.1f×)", GenWarmAim(tc.methods))) {
			t.Errorf("%d methods at %.2f×: %q, want %q…", tc.methods, tc.ratio, got, tc.want)
		}
	}
}

// A runtime comparison that did not run says so and checks nothing, in both
// tables.
func TestRuntimeTablesUnmeasuredGroup(t *testing.T) {
	gs := []GroupResult{{Name: "memory/first", Callers: 1}, {Name: "redis/first", Callers: 1}}
	var b bytes.Buffer
	RuntimeTable(&b, gs)
	MemoryAimTable(&b, gs)
	out := b.String()
	if strings.ContainsAny(out, "✓✗") {
		t.Errorf("unmeasured groups carry a check:\n%s", out)
	}
	if n := strings.Count(out, notMeasured); n < 3 {
		t.Errorf("%d %q in\n%s", n, notMeasured, out)
	}
}

// A 1-caller cell is steady when both quartiles of its per-round speeds lie
// within ±0.1 of the median; the table says which, for every floor.
func TestRuntimeTableSteadiness(t *testing.T) {
	g := GroupResult{Name: "redis/first", Callers: 1, Rounds: 5, OpsCell: 10, Block: 1,
		Variants: []VariantResult{{Name: "wrapper", NsOp: 100}, {Name: "tight", NsOp: 90}, {Name: "loose", NsOp: 90}},
		Ratio:    []float64{1, 1 / 0.9, 1 / 0.9},
		// Speeds: tight [0.85, 0.95], loose [0.75, 0.95].
		Spread:      [][2]float64{{1, 1}, {1 / 0.95, 1 / 0.85}, {1 / 0.95, 1 / 0.75}},
		DeltaNs:     []float64{0, 10, 10},
		DeltaAllocs: []float64{0, 0, 0},
	}
	var b bytes.Buffer
	RuntimeTable(&b, []GroupResult{g})
	out := b.String()
	tight, loose := rowCells(t, out, "redis/first"), rowCells(t, out, "″")
	if !strings.Contains(tight[8], "✓ IQR −0.05/+0.05") {
		t.Errorf("tight floor: %q", tight[8])
	}
	if !strings.Contains(loose[8], "✗ IQR −0.15/+0.05") {
		t.Errorf("loose floor: %q", loose[8])
	}
	if !strings.Contains(out, "1 of 2; not: redis/first vs loose.") {
		t.Errorf("summary missing:\n%s", out)
	}
}

// The memory table checks issue 38's aims against their floors (first
// call: ≤ 0.5 µs and ≤ 2 allocations over a direct call and json.Marshal;
// replay: ≤ 0.3 µs over json.Unmarshal), on both sides of each bound, and
// none against the map+mutex floors.
func TestMemoryAimTable(t *testing.T) {
	group := func(call, floor string, ns, allocs float64) GroupResult {
		return GroupResult{Name: "memory/" + call, Callers: 1, Rounds: 3, OpsCell: 10, Block: 1,
			Variants:    []VariantResult{{Name: "wrapper on memstore"}, {Name: "map+mutex"}, {Name: floor}},
			Ratio:       []float64{1, 1, 1},
			Spread:      [][2]float64{{1, 1}, {1, 1}, {1, 1}},
			DeltaNs:     []float64{0, ns, ns},
			DeltaAllocs: []float64{0, allocs, allocs},
		}
	}
	for _, c := range []struct {
		g    GroupResult
		want string
	}{
		{group("first", MemDirectFloor, 500, 2), "✓ ≤ 0.5 µs, ≤ 2 allocs"},
		{group("first", MemDirectFloor, 501, 2), "✗ ≤ 0.5 µs, ≤ 2 allocs"},
		{group("first", MemDirectFloor, 400, 2.1), "✗ ≤ 0.5 µs, ≤ 2 allocs"},
		{group("replay", MemDecodeFloor, 300, 5), "✓ ≤ 0.3 µs"},
		{group("replay", MemDecodeFloor, 301, 0), "✗ ≤ 0.3 µs"},
	} {
		var b bytes.Buffer
		MemoryAimTable(&b, []GroupResult{c.g})
		var rows [][]string
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, "| "+strings.TrimPrefix(c.g.Name, "memory/")+" |") {
				rows = append(rows, strings.Split(strings.Trim(line, "|"), "|"))
			}
		}
		if len(rows) != 2 {
			t.Fatalf("%d rows in\n%s", len(rows), b.String())
		}
		if got := strings.TrimSpace(rows[0][5]); got != "–" {
			t.Errorf("against map+mutex: %q, want no aim", got)
		}
		if got := strings.TrimSpace(rows[1][5]); got != c.want {
			t.Errorf("%s +%.0f ns, %+.1f allocs: %q, want %q", c.g.Name, c.g.DeltaNs[2], c.g.DeltaAllocs[2], got, c.want)
		}
	}
}
