// Command sim runs the deterministic simulator of idemgen's runtime
// (internal/sim): many seeded schedules of the real executor and memstore
// under faults, checking the invariants at every step.
//
//	go run ./internal/sim/cmd/sim -seeds 1000000          # make sim
//	go run ./internal/sim/cmd/sim -seed 4242 -store losing -v   # replay one schedule with its trace
//
// It prints the schedules per second and, for every failed schedule, its
// seed, the broken invariant and the trace; the exit status is 1 when one
// failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"time"

	"github.com/idemgen/idemgen/internal/sim"
)

func main() {
	os.Exit(run())
}

func run() int {
	seeds := flag.Int("seeds", 100_000, "number of schedules to run")
	first := flag.Uint64("first", 1, "first seed of the run")
	seed := flag.Uint64("seed", 0, "replay this one seed (with -v, print its trace)")
	verbose := flag.Bool("v", false, "print the trace of the replayed seed")
	store := flag.String("store", "", "durable or losing (default: alternate by seed; durable for -seed)")
	faults := flag.String("faults", "all", `fault classes: "all", or names joined by commas, "-name" to remove one (`+sim.AllFaults.String()+`: link, worker-crash, stall, cancel, store-crash, method, goexit, unencodable, payload-reuse, outage)`)
	mutations := flag.String("mutations", "none", "known mistakes to switch on, joined by '+' (release-after-final, complete-without-fencing, lost-complete-reply-as-lease-lost, takeover-without-fingerprint, quick-complete-give-up, outage-as-refusal, release-outage-give-up)")
	renew := flag.String("renew", "seed", "lease renewal: on, off, or seed (a quarter of the seeds)")
	parallel := flag.Int("parallel", runtime.GOMAXPROCS(0), "schedules run at once")
	show := flag.Int("show", 3, "failed schedules printed with their trace")
	flag.Parse()

	var opts sim.Options
	var err error
	if opts.Faults, err = sim.ParseFaults(*faults); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if opts.Mutations, err = sim.ParseMutations(*mutations); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch *renew {
	case "on":
		opts.Renewal = sim.RenewOn
	case "off":
		opts.Renewal = sim.RenewOff
	case "seed":
	default:
		fmt.Fprintf(os.Stderr, "sim: -renew %q: on, off or seed\n", *renew)
		return 2
	}
	if *store != "" {
		if opts.Store, err = sim.ParseStoreKind(*store); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}

	if *seed != 0 {
		opts.Trace = *verbose
		r := sim.Run(*seed, opts)
		if *verbose || !r.OK() {
			if !r.OK() && !*verbose {
				opts.Trace = true
				r = sim.Run(*seed, opts)
			}
			fmt.Println(r.Report())
		}
		if !r.OK() {
			return 1
		}
		fmt.Printf("seed %d: ok (%s)\n", *seed, r.Stats)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	res := sim.Batch(ctx, *first, *seeds, *parallel, *show, opts)
	el := time.Since(start)
	for _, r := range res.Shown {
		if len(r.Trace) > 0 {
			fmt.Println(r.Report())
		} else {
			fmt.Printf("seed %d (store %s): %s\n", r.Seed, r.Store, r.Violations[0])
		}
	}
	fmt.Printf("%d schedules (seeds %d..%d, store %s, faults %s, mutations %s) in %v: %.0f schedules/s on %d goroutines; %d failed\n",
		res.Ran, *first, *first+uint64(res.Ran)-1, storeName(opts.Store), opts.Faults, opts.Mutations, el.Round(time.Millisecond),
		float64(res.Ran)/el.Seconds(), *parallel, res.Failed)
	fmt.Printf("totals: %s\n", res.Stats)
	if res.Failed > 0 || res.Ran < *seeds {
		return 1
	}
	return 0
}

func storeName(k sim.StoreKind) string {
	if k == 0 {
		return "durable/losing by seed"
	}
	return k.String()
}
