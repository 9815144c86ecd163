// Package benchcmp measures what idemgen costs, next to floors measured in
// the same process: the runtime on every store against the same store
// operations written by hand with the raw driver, and the generator against
// loading the same package with go/packages and `go list -export -deps`.
// internal/cmd/bench prints its tables (make bench).
//
// Why a command and not `go test -bench`: every figure here is a ratio of
// two variants run alternately in short cells (framework, floor, floor, …,
// rotating which goes first), with the median of the per-round ratios;
// testing.B sizes and runs one benchmark at a time, so that pairing, the
// round-trip counters and the tables would all have to be rebuilt on top of
// it by a formatter. A command does it directly and prints markdown.
package benchcmp

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Variant is one side of a comparison. Prepare (optional) is called before
// each cell, outside the timing and the allocation count, to build the
// inputs of the cell's n calls; Op performs call i of the cell (0 <= i < n),
// from callers goroutines at once.
type Variant struct {
	Name    string
	Prepare func(n int) error
	Op      func(i int) error
}

// Counter is a monotonic count of something per call (round trips).
type Counter struct {
	Name string
	Load func() int64
}

// Group is a comparison: Variants[0] is the framework, the others are floors.
type Group struct {
	Name     string
	Callers  int
	Variants []Variant
	Counters []Counter
}

// Config bounds a comparison.
type Config struct {
	Rounds int           // cells per variant (odd: the median is a round's)
	Cell   time.Duration // target length of one cell of the framework
	MinOps int           // at least this many calls per cell
	MaxOps int           // at most this many calls per cell
}

// VariantResult is what one variant measured.
type VariantResult struct {
	Name     string
	NsOp     float64            // median over cells of ns per call
	AllocsOp float64            // median over cells of allocations per call
	PerOp    map[string]float64 // counters per call, over all cells
}

// GroupResult is what a comparison measured.
type GroupResult struct {
	Name     string
	Callers  int
	OpsCell  int
	Rounds   int
	Variants []VariantResult
	// Ratio[j] is the median over rounds of ns(framework)/ns(variant j);
	// Ratio[0] is 1. DeltaNs[j] and DeltaAllocs[j] are the medians of the
	// per-round differences framework − variant j.
	Ratio       []float64
	DeltaNs     []float64
	DeltaAllocs []float64
	// Spread[j] is the interquartile range of the per-round ratios.
	Spread [][2]float64
}

type cell struct {
	ns, allocs float64
}

// runCell runs n calls of v on callers goroutines and returns ns and
// allocations per call.
func runCell(v Variant, n, callers int) (cell, error) {
	if v.Prepare != nil {
		if err := v.Prepare(n); err != nil {
			return cell{}, fmt.Errorf("%s: prepare: %w", v.Name, err)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	var firstErr error
	start := time.Now()
	if callers <= 1 {
		for i := range n {
			if err := v.Op(i); err != nil {
				firstErr = fmt.Errorf("%s: call %d: %w", v.Name, i, err)
				break
			}
		}
	} else {
		var next atomic.Int64
		var once sync.Once
		var wg sync.WaitGroup
		for range min(callers, n) {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					if err := v.Op(i); err != nil {
						once.Do(func() { firstErr = fmt.Errorf("%s: call %d: %w", v.Name, i, err) })
						next.Store(int64(n))
						return
					}
				}
			})
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms)
	if firstErr != nil {
		return cell{}, firstErr
	}
	return cell{
		ns:     float64(elapsed.Nanoseconds()) / float64(n),
		allocs: float64(ms.Mallocs-mallocs) / float64(n),
	}, nil
}

// Run measures g: it sizes a cell on the framework, warms every variant up
// with one cell, then runs cfg.Rounds rounds of one cell per variant, the
// variant that goes first rotating from round to round.
func Run(g Group, cfg Config) (GroupResult, error) {
	res := GroupResult{Name: g.Name, Callers: g.Callers, Rounds: cfg.Rounds}
	// Size: grow until a cell takes a quarter of the target.
	n := max(cfg.MinOps, g.Callers)
	for {
		c, err := runCell(g.Variants[0], n, g.Callers)
		if err != nil {
			return res, err
		}
		took := time.Duration(c.ns * float64(n))
		if took >= cfg.Cell/4 || n >= cfg.MaxOps {
			if took > 0 {
				n = int(float64(n) * float64(cfg.Cell) / float64(took))
			}
			break
		}
		n *= 4
	}
	n = min(max(n, cfg.MinOps, g.Callers), cfg.MaxOps)
	res.OpsCell = n
	for _, v := range g.Variants { // warm-up
		if _, err := runCell(v, n, g.Callers); err != nil {
			return res, err
		}
	}
	k := len(g.Variants)
	cells := make([][]cell, k)
	before := make([]map[string]int64, k)
	totals := make([]map[string]int64, k)
	for j := range k {
		totals[j] = map[string]int64{}
		before[j] = map[string]int64{}
	}
	for r := range cfg.Rounds {
		for s := range k {
			j := (r + s) % k
			for _, c := range g.Counters {
				before[j][c.Name] = c.Load()
			}
			c, err := runCell(g.Variants[j], n, g.Callers)
			if err != nil {
				return res, err
			}
			for _, ctr := range g.Counters {
				totals[j][ctr.Name] += ctr.Load() - before[j][ctr.Name]
			}
			cells[j] = append(cells[j], c)
		}
	}
	calls := float64(n * cfg.Rounds)
	for j, v := range g.Variants {
		vr := VariantResult{Name: v.Name, PerOp: map[string]float64{}}
		vr.NsOp = median(collect(cells[j], func(c cell) float64 { return c.ns }))
		vr.AllocsOp = median(collect(cells[j], func(c cell) float64 { return c.allocs }))
		for name, t := range totals[j] {
			vr.PerOp[name] = float64(t) / calls
		}
		res.Variants = append(res.Variants, vr)
		ratios := make([]float64, cfg.Rounds)
		dns := make([]float64, cfg.Rounds)
		dal := make([]float64, cfg.Rounds)
		for r := range cfg.Rounds {
			ratios[r] = cells[0][r].ns / cells[j][r].ns
			dns[r] = cells[0][r].ns - cells[j][r].ns
			dal[r] = cells[0][r].allocs - cells[j][r].allocs
		}
		res.Ratio = append(res.Ratio, median(ratios))
		res.DeltaNs = append(res.DeltaNs, median(dns))
		res.DeltaAllocs = append(res.DeltaAllocs, median(dal))
		res.Spread = append(res.Spread, [2]float64{quantile(ratios, 0.25), quantile(ratios, 0.75)})
	}
	return res, nil
}

func collect(cs []cell, f func(cell) float64) []float64 {
	out := make([]float64, len(cs))
	for i, c := range cs {
		out[i] = f(c)
	}
	return out
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }

// quantile is the q-quantile of xs by linear interpolation.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[lo]
	}
	f := pos - float64(lo)
	return s[lo]*(1-f) + s[lo+1]*f
}
