package benchcmp

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Dur formats nanoseconds for a table.
func Dur(ns float64) string {
	switch {
	case ns < 10_000:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	case ns < 1e6:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	}
}

func perOp(v VariantResult) string {
	if len(v.PerOp) == 0 {
		return "–"
	}
	names := make([]string, 0, len(v.PerOp))
	for n := range v.PerOp {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, v.PerOp[n]))
	}
	return strings.Join(parts, ", ")
}

// speedAim returns the aim on the speed of a row, if it has one (1 caller):
// ≥ 0.9× the floor of its design: the pipelined transaction for
// transactional PostgreSQL, the three autocommitted statements for lease
// mode, one SELECT for a PostgreSQL replay, SET NX PX + Lua and GET on
// Redis.
func speedAim(g GroupResult, floor string) (float64, bool) {
	if g.Callers != 1 || !strings.HasSuffix(g.Name, "/first") && !strings.HasSuffix(g.Name, "/replay") {
		return 0, false
	}
	switch {
	case strings.HasSuffix(g.Name, "/replay") && (strings.HasPrefix(g.Name, "postgres") || strings.HasPrefix(g.Name, "redis") || strings.HasPrefix(g.Name, "tiered")):
		return 0.9, true
	case strings.HasPrefix(g.Name, "postgres lease"):
		return 0.9, strings.HasPrefix(floor, "autocommit")
	case strings.HasPrefix(g.Name, "postgres"):
		return 0.9, strings.HasPrefix(floor, "pipelined")
	case strings.HasPrefix(g.Name, "redis"), strings.HasPrefix(g.Name, "tiered"):
		return 0.9, true
	}
	return 0, false
}

// SteadyWithin is how far the quartiles of a 1-caller cell's per-round
// speeds may lie from their median for the cell to count as steady (the
// aim of issue 11: an aim of 0.9× can only be decided on cells this tight).
const SteadyWithin = 0.1

// steady reports whether floor j's speed quartiles lie within SteadyWithin
// of its median, and the distances below and above.
func steady(g GroupResult, j int) (ok bool, below, above float64) {
	speed := 1 / g.Ratio[j]
	lo, hi := 1/g.Spread[j][1], 1/g.Spread[j][0]
	below, above = speed-lo, hi-speed
	return below <= SteadyWithin+1e-9 && above <= SteadyWithin+1e-9, below, above
}

// rttAim checks the round trips of the framework: a first call adds at most
// 2 to the business statements (1 INSERT on PostgreSQL stores), a replay
// takes 1.
func rttAim(g GroupResult) string {
	v := g.Variants[0]
	if len(v.PerOp) == 0 {
		return ""
	}
	total, floor := 0.0, 0.0
	for name, n := range v.PerOp {
		total += n
		floor += g.Variants[1].PerOp[name]
	}
	if strings.HasSuffix(g.Name, "/replay") {
		return check(total <= 1.05, fmt.Sprintf("replay %.2f (aim 1)", total))
	}
	business := 0.0
	if strings.HasPrefix(g.Name, "postgres") || strings.HasPrefix(g.Name, "tiered") {
		business = 1
	}
	added := total - business
	if strings.HasPrefix(g.Name, "tiered") { // two tiers: as many as the floor
		return check(total <= floor+0.05, fmt.Sprintf("+%.2f (aim: the floor's +%.2f)", added, floor-business))
	}
	return check(added <= 2.05, fmt.Sprintf("+%.2f (aim ≤ 2)", added))
}

func check(ok bool, s string) string {
	if ok {
		return "✓ " + s
	}
	return "✗ " + s
}

// notMeasured stands in a table for a figure the harness did not measure.
const notMeasured = "not measured"

// RuntimeTable writes the runtime comparisons as a markdown table, then,
// for the 1-caller cells, whether each is steady (see SteadyWithin). A
// group that was not measured says so and checks nothing.
func RuntimeTable(w io.Writer, gs []GroupResult) {
	fmt.Fprintln(w, "| store / call | callers | wrapper | floor (same store operations by hand) | floor | speed vs floor (median of pairs) [IQR] | allocs/op wrapper / floor | round trips/op wrapper / floor | aims |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---|---:|---|---|")
	var steadyN, cells int
	var unsteady []string
	for _, g := range gs {
		if !g.Measured() {
			fmt.Fprintf(w, "| %s | %d | %s | | | %s | | | |\n", g.Name, g.Callers, notMeasured, notMeasured)
			continue
		}
		fw := g.Variants[0]
		for j := 1; j < len(g.Variants); j++ {
			fl := g.Variants[j]
			speed := 1 / g.Ratio[j]
			lo, hi := 1/g.Spread[j][1], 1/g.Spread[j][0]
			var aims []string
			if aim, ok := speedAim(g, fl.Name); ok {
				aims = append(aims, check(speed >= aim, fmt.Sprintf("≥ %.1f×", aim)))
			}
			if j == 1 {
				if a := rttAim(g); a != "" {
					aims = append(aims, "rtt "+a)
				}
			}
			if g.Callers == 1 {
				ok, below, above := steady(g, j)
				aims = append(aims, check(ok, fmt.Sprintf("IQR −%.2f/+%.2f (aim ±%.1f)", below, above, SteadyWithin)))
				cells++
				if ok {
					steadyN++
				} else {
					unsteady = append(unsteady, g.Name+" vs "+fl.Name)
				}
			}
			name, callers, fwNs := g.Name, fmt.Sprint(g.Callers), Dur(fw.NsOp)
			if j > 1 {
				name, callers, fwNs = "″", "″", "″"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | **%.2f×** [%.2f–%.2f] | %.1f / %.1f | %s / %s | %s |\n",
				name, callers, fwNs, fl.Name, Dur(fl.NsOp), speed, lo, hi,
				fw.AllocsOp, fl.AllocsOp, perOp(fw), perOp(fl), strings.Join(aims, "; "))
		}
	}
	if cells > 0 {
		fmt.Fprintf(w, "\nSteady 1-caller cells (interquartile range of the per-round speeds within ±%.1f of the median): %d of %d", SteadyWithin, steadyN, cells)
		if len(unsteady) > 0 {
			fmt.Fprintf(w, "; not: %s", strings.Join(unsteady, ", "))
		}
		fmt.Fprintln(w, ".")
	}
}

// MemoryAim is issue 38's aim for what the wrapper adds on memory: over
// the floor named Against, at most Ns nanoseconds and, when Allocs >= 0,
// at most Allocs allocations per call.
type MemoryAim struct {
	Call, Against string
	Ns, Allocs    float64
}

// MemoryAims are the aims of the memory table: a first call adds at most
// 0.5 µs and 2 allocations to a direct call and json.Marshal, a replay at
// most 0.3 µs to json.Unmarshal. The map+mutex floors have none: they say
// what a hand-written store would cost.
var MemoryAims = []MemoryAim{
	{Call: "first", Against: MemDirectFloor, Ns: 500, Allocs: 2},
	{Call: "replay", Against: MemDecodeFloor, Ns: 300, Allocs: -1},
}

func (a MemoryAim) String() string {
	if a.Allocs < 0 {
		return fmt.Sprintf("≤ %.1f µs", a.Ns/1000)
	}
	return fmt.Sprintf("≤ %.1f µs, ≤ %.0f allocs", a.Ns/1000, a.Allocs)
}

// MemoryAimTable writes what the wrapper adds on memory beyond the floors,
// against MemoryAims.
func MemoryAimTable(w io.Writer, gs []GroupResult) {
	fmt.Fprintln(w, "| call | callers | against | wrapper − floor, time (median of pairs) | wrapper − floor, allocs/op | aim (issue 38) |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---|")
	for _, g := range gs {
		if !strings.HasPrefix(g.Name, "memory/") {
			continue
		}
		call := strings.TrimPrefix(g.Name, "memory/")
		if !g.Measured() {
			fmt.Fprintf(w, "| %s | %d | | %s | %s | %s |\n", call, g.Callers, notMeasured, notMeasured, notMeasured)
			continue
		}
		for j := 1; j < len(g.Variants); j++ {
			aim := "–"
			for _, a := range MemoryAims {
				if a.Call == call && a.Against == g.Variants[j].Name {
					ok := g.DeltaNs[j] <= a.Ns && (a.Allocs < 0 || g.DeltaAllocs[j] <= a.Allocs)
					aim = check(ok, a.String())
				}
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %+.1f | %s |\n", call, g.Callers,
				g.Variants[j].Name, Dur(g.DeltaNs[j]), g.DeltaAllocs[j], aim)
		}
	}
}

// GenColdAim is the cold generator's aim: the idemgen binary at most 1.1×
// `go list -export -deps`, each with an empty GOCACHE.
const GenColdAim = 1.1

// GenWarmAim is the warm generator's aim for a package of n annotated
// methods (issue 20): at most 1.5× a bare packages.Load up to 100 methods,
// 3.5× beyond (the 1,000-method package of the benchmark). The generator
// builds its code with jennifer and formats it with go/format
// (docs/decisions/generator-emit.md), whose cost grows with the output.
func GenWarmAim(n int) float64 {
	if n <= 100 {
		return 1.5
	}
	return 3.5
}

// GenTable writes the generator comparisons. A side the harness did not
// measure (no warm or no cold pairs) says so and checks nothing.
func GenTable(w io.Writer, rs []GenResult) {
	fmt.Fprintln(w, "| methods | generated lines | warm: idemgen (generate.Generate) | warm: packages.Load alone | warm ratio (median of pairs) [IQR] | cold: idemgen, empty GOCACHE | cold: go list -export -deps, empty GOCACHE | cold ratio (median of pairs) |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---|---:|---:|---|")
	for _, r := range rs {
		warmIdem, warmLoad, warm := notMeasured, notMeasured, notMeasured
		if r.Warm.Measured() {
			warmIdem, warmLoad = Dur(r.Warm.Variants[0].NsOp), Dur(r.Warm.Variants[1].NsOp)
			aim := GenWarmAim(r.Methods)
			warm = check(r.Warm.Ratio[1] <= aim, fmt.Sprintf("%.2f× [%.2f–%.2f] (aim ≤ %.1f×)",
				r.Warm.Ratio[1], r.Warm.Spread[1][0], r.Warm.Spread[1][1], aim))
		}
		coldIdem, coldList, cold := notMeasured, notMeasured, notMeasured
		if len(r.ColdIdemgen) > 0 && len(r.ColdList) > 0 {
			coldIdem = MedianDuration(r.ColdIdemgen).Round(10 * time.Millisecond).String()
			coldList = MedianDuration(r.ColdList).Round(10 * time.Millisecond).String()
			cold = check(r.ColdRatio <= GenColdAim, fmt.Sprintf("%.2f× (aim ≤ %.1f×)", r.ColdRatio, GenColdAim))
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", r.Methods, r.Lines, warmIdem, warmLoad, warm, coldIdem, coldList, cold)
	}
	if len(rs) < 2 {
		return
	}
	a, b := rs[0], rs[len(rs)-1]
	if !a.Warm.Measured() || !b.Warm.Measured() {
		fmt.Fprintf(w, "\nGrowth %d → %d methods: %s (no warm pairs).\n", a.Methods, b.Methods, notMeasured)
		return
	}
	growth := func(x, y float64) string { return fmt.Sprintf("%.1f×", y/x) }
	m := float64(b.Methods) / float64(a.Methods)
	warmG := b.Warm.Variants[0].NsOp / a.Warm.Variants[0].NsOp
	coldG := notMeasured
	if len(a.ColdIdemgen) > 0 && len(b.ColdIdemgen) > 0 {
		coldG = growth(float64(MedianDuration(a.ColdIdemgen)), float64(MedianDuration(b.ColdIdemgen)))
	}
	perA := (a.Warm.Variants[0].NsOp - a.Warm.Variants[1].NsOp) / float64(a.Methods)
	perB := (b.Warm.Variants[0].NsOp - b.Warm.Variants[1].NsOp) / float64(b.Methods)
	fmt.Fprintf(w, "\nGrowth %d → %d methods (%.0f× the methods): warm idemgen %s, packages.Load %s, cold idemgen %s. "+
		"Generator's own cost per method (warm idemgen − packages.Load, ÷ methods): %s at %d, %s at %d (%s).\n",
		a.Methods, b.Methods, m,
		growth(a.Warm.Variants[0].NsOp, b.Warm.Variants[0].NsOp),
		growth(a.Warm.Variants[1].NsOp, b.Warm.Variants[1].NsOp), coldG,
		Dur(perA), a.Methods, Dur(perB), b.Methods,
		check(warmG <= m, "linear at worst"))
}
