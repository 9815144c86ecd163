package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemgen/idemgen/internal/mutant"
)

// ParseFaults reads a fault set: "all", "none", or names joined by commas,
// "all" minus names with a leading '-' ("all,-goexit").
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		remove := strings.HasPrefix(part, "-")
		part = strings.TrimPrefix(part, "-")
		var x Faults
		switch part {
		case "all":
			x = AllFaults
		case "none", "":
			continue
		default:
			for i, n := range faultNames() {
				if n == part {
					x = 1 << i
				}
			}
			if x == 0 {
				return 0, fmt.Errorf("sim: unknown fault %q (one of %s, all, none)", part, strings.Join(faultNames(), ", "))
			}
		}
		if remove {
			f &^= x
		} else {
			f |= x
		}
	}
	return f, nil
}

func faultNames() []string {
	return []string{"link", "worker-crash", "stall", "cancel", "store-crash", "method", "goexit", "unencodable", "payload-reuse", "outage"}
}

func (f Faults) String() string {
	if f == AllFaults {
		return "all"
	}
	var names []string
	for i, n := range faultNames() {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ParseMutations reads mutation names joined by '+' or ',' ("none" for
// none), as mutant.Flag.String writes them.
//
// Mutations are compiled into the runtime only with the build tag
// idemmutant: without it, naming one is an error, not a run that cannot
// fail.
func ParseMutations(s string) (mutant.Flag, error) {
	var f mutant.Flag
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		if part == "none" {
			continue
		}
		found := false
		for _, m := range mutant.All() {
			if m.String() == part {
				f |= m
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("sim: unknown mutation %q", part)
		}
	}
	if f != 0 && !mutant.Planted {
		return 0, fmt.Errorf("sim: mutation %v: this build has none compiled in: build with -tags idemmutant", f)
	}
	return f, nil
}

// BatchResult is what Batch ran and found.
type BatchResult struct {
	Ran    int       // schedules run
	Failed int       // schedules that broke an invariant
	Shown  []*Result // the first failures (with their trace), then more seeds without
	Stats  Stats     // summed over every schedule
}

// maxShown bounds BatchResult.Shown.
const maxShown = 100

// Batch runs the schedules of seeds first..first+n-1 on parallel
// goroutines, alternating the store kind by seed when opts.Store is 0 (even
// seeds durable, odd seeds losing). The first traced failures are re-run
// with a trace. A cancelled ctx stops it early.
func Batch(ctx context.Context, first uint64, n int, parallel, traced int, opts Options) BatchResult {
	var (
		next atomic.Uint64
		mu   sync.Mutex
		wg   sync.WaitGroup
		res  BatchResult
	)
	next.Store(first)
	end := first + uint64(n)
	for range max(parallel, 1) {
		wg.Go(func() {
			var st Stats
			ran := 0
			runner := NewRunner()
			defer runner.Close()
			for ctx.Err() == nil {
				seed := next.Add(1) - 1
				if seed >= end {
					break
				}
				o := opts
				if o.Store == 0 {
					o.Store = Durable
					if seed%2 == 1 {
						o.Store = Losing
					}
				}
				r := runner.Run(seed, o)
				ran++
				st.add(r.Stats)
				if r.OK() {
					continue
				}
				mu.Lock()
				res.Failed++
				trace := res.Failed <= traced
				mu.Unlock()
				if trace {
					o.Trace = true
					r = runner.Run(seed, o)
				}
				mu.Lock()
				if len(res.Shown) < maxShown {
					res.Shown = append(res.Shown, r)
				}
				mu.Unlock()
			}
			mu.Lock()
			res.Ran += ran
			res.Stats.add(st)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}
