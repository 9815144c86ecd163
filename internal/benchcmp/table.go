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

// speedAim returns the aim on the speed of a row, if it has one: ≥ 0.9× the
// pipelined floor at 1 caller on PostgreSQL, ≥ 0.9× the floor on Redis.
func speedAim(g GroupResult, floor string) (float64, bool) {
	if g.Callers != 1 || !strings.HasSuffix(g.Name, "/first") && !strings.HasSuffix(g.Name, "/replay") {
		return 0, false
	}
	switch {
	case strings.HasPrefix(g.Name, "postgres"):
		return 0.9, strings.HasPrefix(floor, "pipelined") || strings.HasSuffix(g.Name, "/replay")
	case strings.HasPrefix(g.Name, "redis"):
		return 0.9, true
	}
	return 0, false
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

// RuntimeTable writes the runtime comparisons as a markdown table.
func RuntimeTable(w io.Writer, gs []GroupResult) {
	fmt.Fprintln(w, "| store / call | callers | wrapper | floor (same store operations by hand) | floor | speed vs floor (median of pairs) [IQR] | allocs/op wrapper / floor | round trips/op wrapper / floor | aims |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---|---:|---|---|")
	for _, g := range gs {
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
			name, callers, fwNs := g.Name, fmt.Sprint(g.Callers), Dur(fw.NsOp)
			if j > 1 {
				name, callers, fwNs = "″", "″", "″"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | **%.2f×** [%.2f–%.2f] | %.1f / %.1f | %s / %s | %s |\n",
				name, callers, fwNs, fl.Name, Dur(fl.NsOp), speed, lo, hi,
				fw.AllocsOp, fl.AllocsOp, perOp(fw), perOp(fl), strings.Join(aims, "; "))
		}
	}
}

// MemoryAimTable writes what the wrapper adds on memory beyond the floors.
func MemoryAimTable(w io.Writer, gs []GroupResult) {
	fmt.Fprintln(w, "| call | callers | against | wrapper − floor, time (median of pairs) | wrapper − floor, allocs/op | aim ≤ 1 µs, ≤ 10 allocs |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---|")
	for _, g := range gs {
		if !strings.HasPrefix(g.Name, "memory/") {
			continue
		}
		for j := 1; j < len(g.Variants); j++ {
			ok := g.DeltaNs[j] <= 1000 && g.DeltaAllocs[j] <= 10
			fmt.Fprintf(w, "| %s | %d | %s | %s | %+.1f | %s |\n", strings.TrimPrefix(g.Name, "memory/"), g.Callers,
				g.Variants[j].Name, Dur(g.DeltaNs[j]), g.DeltaAllocs[j], check(ok, ""))
		}
	}
}

// GenTable writes the generator comparisons.
func GenTable(w io.Writer, rs []GenResult) {
	fmt.Fprintln(w, "| methods | generated lines | warm: idemgen (generate.Generate) | warm: packages.Load alone | warm ratio (median of pairs) | cold: idemgen, empty GOCACHE | cold: go list -export -deps, empty GOCACHE | cold ratio (median of pairs) |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---|---:|---:|---|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", r.Methods, r.Lines,
			Dur(r.Warm.Variants[0].NsOp), Dur(r.Warm.Variants[1].NsOp),
			check(r.Warm.Ratio[1] <= 2, fmt.Sprintf("%.2f× (aim ≤ 2×)", r.Warm.Ratio[1])),
			MedianDuration(r.ColdIdemgen).Round(10*time.Millisecond), MedianDuration(r.ColdList).Round(10*time.Millisecond),
			check(r.ColdRatio <= 1.1, fmt.Sprintf("%.2f× (aim ≤ 1.1×)", r.ColdRatio)))
	}
	if len(rs) >= 2 {
		a, b := rs[0], rs[len(rs)-1]
		growth := func(x, y float64) string { return fmt.Sprintf("%.1f×", y/x) }
		m := float64(b.Methods) / float64(a.Methods)
		warmG := b.Warm.Variants[0].NsOp / a.Warm.Variants[0].NsOp
		coldG := float64(MedianDuration(b.ColdIdemgen)) / float64(MedianDuration(a.ColdIdemgen))
		perA := (a.Warm.Variants[0].NsOp - a.Warm.Variants[1].NsOp) / float64(a.Methods)
		perB := (b.Warm.Variants[0].NsOp - b.Warm.Variants[1].NsOp) / float64(b.Methods)
		fmt.Fprintf(w, "\nGrowth %d → %d methods (%.0f× the methods): warm idemgen %s, packages.Load %s, cold idemgen %s. "+
			"Generator's own cost per method (warm idemgen − packages.Load, ÷ methods): %s at %d, %s at %d (%s).\n",
			a.Methods, b.Methods, m,
			growth(a.Warm.Variants[0].NsOp, b.Warm.Variants[0].NsOp),
			growth(a.Warm.Variants[1].NsOp, b.Warm.Variants[1].NsOp), growth(1, coldG),
			Dur(perA), a.Methods, Dur(perB), b.Methods,
			check(warmG <= m, "linear at worst"))
	}
}
