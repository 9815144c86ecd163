// Package benchcmp measures what idemgen costs, next to floors measured in
// the same process: the runtime on every store against the same store
// operations written by hand with the raw driver, and the generator against
// loading the same package with go/packages and `go list -export -deps`.
// internal/cmd/bench prints its tables (make bench).
//
// Why a command and not `go test -bench`: every figure here is a ratio of
// two variants interleaved call by call within short rounds (framework,
// floor, floor, …, rotating which goes first), with the median of the
// per-round ratios;
// testing.B sizes and runs one benchmark at a time, so that pairing, the
// round-trip counters and the tables would all have to be rebuilt on top of
// it by a formatter. A command does it directly and prints markdown.
package benchcmp

import (
	"fmt"
	"math"
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
	Rounds int           // rounds (pairs); odd, so that the median is a round's
	Round  time.Duration // target length of one variant's share of a round
	// Block is the shortest run of calls of one variant between two
	// switches of variant with 1 caller: 0 switches after every call (the
	// floors of the stores, at tens of µs a call); calls of a few hundred ns
	// run in blocks this long, so that the two clock reads around a block
	// stay out of the figure. BlockConcurrent is the same with several
	// callers, where each block starts and waits for its goroutines.
	Block, BlockConcurrent time.Duration
	MinOps                 int // at least this many calls per variant per round
	MaxOps                 int // at most this many calls per variant per round
}

// VariantResult is what one variant measured.
type VariantResult struct {
	Name     string
	NsOp     float64            // median over rounds of ns per call
	AllocsOp float64            // allocations per call, over one separate cell
	PerOp    map[string]float64 // counters per call, over all rounds
}

// GroupResult is what a comparison measured. A zero GroupResult (Rounds 0)
// is a comparison that was not measured; Measured says which.
type GroupResult struct {
	Name     string
	Callers  int
	OpsCell  int // calls per variant per round
	Block    int // calls per block: 1 is call-by-call interleaving
	Rounds   int
	Variants []VariantResult
	// Ratio[j] is the median over rounds of ns(framework)/ns(variant j);
	// Ratio[0] is 1. DeltaNs[j] is the median of the per-round differences
	// framework − variant j, DeltaAllocs[j] the difference of allocations
	// per call.
	Ratio       []float64
	DeltaNs     []float64
	DeltaAllocs []float64
	// Spread[j] is the interquartile range of the per-round ratios.
	Spread [][2]float64
}

// Measured reports whether g holds figures (it ran at least one round).
func (g GroupResult) Measured() bool {
	return g.Rounds > 0 && len(g.Ratio) == len(g.Variants) && len(g.Variants) > 1
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
	start := time.Now()
	err := runCalls(v, 0, n, callers)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms)
	if err != nil {
		return cell{}, err
	}
	return cell{
		ns:     float64(elapsed.Nanoseconds()) / float64(n),
		allocs: float64(ms.Mallocs-mallocs) / float64(n),
	}, nil
}

// runCalls performs calls lo..hi-1 of v on callers goroutines.
func runCalls(v Variant, lo, hi, callers int) error {
	if callers <= 1 || hi-lo <= 1 {
		for i := lo; i < hi; i++ {
			if err := v.Op(i); err != nil {
				return fmt.Errorf("%s: call %d: %w", v.Name, i, err)
			}
		}
		return nil
	}
	var next atomic.Int64
	next.Store(int64(lo))
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range min(callers, hi-lo) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= hi {
					return
				}
				if err := v.Op(i); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s: call %d: %w", v.Name, i, err) })
					next.Store(int64(hi))
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Run measures g. It sizes a round on the framework, warms every variant
// up with one cell and counts allocations in another, then runs cfg.Rounds
// rounds. In a round every variant makes the same number of calls,
// interleaved: one block of calls of each variant in turn (a block is one
// call unless the calls are too short to time one by one; see
// Config.Block), the variant that goes first rotating from block to block
// and from round to round, so that whatever the machine does meanwhile
// falls on all variants alike. A round's ratio is the framework's time over
// the round divided by the variant's.
func Run(g Group, cfg Config) (GroupResult, error) {
	res := GroupResult{Name: g.Name, Callers: g.Callers}
	if cfg.Rounds < 1 {
		return res, fmt.Errorf("%s: %d rounds: want at least 1", g.Name, cfg.Rounds)
	}
	if len(g.Variants) < 2 {
		return res, fmt.Errorf("%s: %d variants: want the framework and at least one floor", g.Name, len(g.Variants))
	}
	// Size: grow until a cell takes a quarter of the target.
	n := max(cfg.MinOps, g.Callers, 1)
	var perCall float64
	for {
		c, err := runCell(g.Variants[0], n, g.Callers)
		if err != nil {
			return res, err
		}
		perCall = c.ns
		took := time.Duration(c.ns * float64(n))
		if took >= cfg.Round/4 || n >= cfg.MaxOps {
			if took > 0 {
				n = int(float64(n) * float64(cfg.Round) / float64(took))
			}
			break
		}
		n *= 4
	}
	n = max(min(max(n, cfg.MinOps, g.Callers), cfg.MaxOps), 1)
	block := cfg.Block
	if g.Callers > 1 {
		block = cfg.BlockConcurrent
	}
	b := 1
	if perCall > 0 {
		b = max(b, int(math.Ceil(float64(block)/perCall)))
	}
	if g.Callers > 1 {
		b = max(b, g.Callers)
	}
	b = min(b, n)
	n = (n + b - 1) / b * b // whole blocks
	res.OpsCell, res.Block = n, b
	k := len(g.Variants)
	allocs := make([]float64, k)
	for j, v := range g.Variants { // warm-up, then allocations
		if _, err := runCell(v, n, g.Callers); err != nil {
			return res, err
		}
		c, err := runCell(v, n, g.Callers)
		if err != nil {
			return res, err
		}
		allocs[j] = c.allocs
	}
	ns := make([][]float64, k) // ns[j][r]: variant j's ns per call in round r
	totals := make([]map[string]int64, k)
	for j := range k {
		totals[j] = map[string]int64{}
	}
	before := make([]int64, len(g.Counters))
	elapsed := make([]time.Duration, k)
	for r := range cfg.Rounds {
		for _, v := range g.Variants {
			if v.Prepare != nil {
				if err := v.Prepare(n); err != nil {
					return res, fmt.Errorf("%s: prepare: %w", v.Name, err)
				}
			}
		}
		clear(elapsed)
		for lo := 0; lo < n; lo += b {
			for s := range k {
				j := (lo/b + r + s) % k
				v := g.Variants[j]
				for c, ctr := range g.Counters {
					before[c] = ctr.Load()
				}
				start := time.Now()
				err := runCalls(v, lo, lo+b, g.Callers)
				elapsed[j] += time.Since(start)
				if err != nil {
					return res, err
				}
				for c, ctr := range g.Counters {
					totals[j][ctr.Name] += ctr.Load() - before[c]
				}
			}
		}
		for j := range k {
			ns[j] = append(ns[j], float64(elapsed[j].Nanoseconds())/float64(n))
		}
	}
	res.Rounds = cfg.Rounds
	calls := float64(n * cfg.Rounds)
	for j, v := range g.Variants {
		vr := VariantResult{Name: v.Name, PerOp: map[string]float64{}, NsOp: median(ns[j]), AllocsOp: allocs[j]}
		for name, t := range totals[j] {
			vr.PerOp[name] = float64(t) / calls
		}
		res.Variants = append(res.Variants, vr)
		ratios := make([]float64, cfg.Rounds)
		dns := make([]float64, cfg.Rounds)
		for r := range cfg.Rounds {
			ratios[r] = ns[0][r] / ns[j][r]
			dns[r] = ns[0][r] - ns[j][r]
		}
		res.Ratio = append(res.Ratio, median(ratios))
		res.DeltaNs = append(res.DeltaNs, median(dns))
		res.DeltaAllocs = append(res.DeltaAllocs, allocs[0]-allocs[j])
		res.Spread = append(res.Spread, [2]float64{quantile(ratios, 0.25), quantile(ratios, 0.75)})
	}
	return res, nil
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
