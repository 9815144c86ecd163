// Command bench prints what idemgen costs next to floors measured in the
// same process (make bench): the runtime on every store against the same
// store operations written by hand with the raw driver, and the generator
// against go/packages and `go list -export -deps`. The peers (Fiber's
// idempotency middleware, an in-house SETNX + unique index) are in the
// separate bench/ module.
//
//	scripts/with-services.sh go run ./internal/cmd/bench [-only runtime,gen,full] [-quick]
//
// PostgreSQL, Redis and MySQL come from $IDEM_PG_DSN, $IDEM_REDIS_ADDR and
// $IDEM_MYSQL_DSN; a store whose server is missing is skipped and said so.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/benchcmp"
)

func main() {
	only := flag.String("only", "runtime,gen,full", "sections to run: runtime, gen, full")
	fullSizes := flag.String("full-sizes", "10000,1000000", "records of the full store in the full section")
	stores := flag.String("stores", strings.Join(benchcmp.Stores, ","), "stores of the runtime section")
	callersFlag := flag.String("callers", "1,16", "concurrent callers of the runtime section")
	rounds := flag.Int("rounds", 41, "rounds (pairs) per runtime comparison")
	round := flag.Duration("round", 15*time.Millisecond, "target length of one variant's share of a runtime round")
	block := flag.Duration("block", 20*time.Microsecond, "shortest run of one variant's calls between switches, 1 caller (0: switch after every call)")
	blockConc := flag.Duration("block-concurrent", time.Millisecond, "shortest run of one variant's calls between switches, several callers")
	minOps := flag.Int("min-ops", 8, "at least this many calls per variant per runtime round")
	sizes := flag.String("sizes", "10,100,1000", "annotated methods of the generator's synthetic packages")
	warm := flag.Int("warm-rounds", 7, "pairs per warm generator comparison")
	cold := flag.Int("cold-rounds", 3, "pairs per cold generator comparison")
	quick := flag.Bool("quick", false, "few rounds and short cells (a smoke run)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the memory wrapper cells to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the memory wrapper cells to this file")
	genprofile := flag.String("genprofile", "", "write a CPU profile of the generator on 1,000 methods to this file, and print its CPU time and allocations per run")
	genRounds := flag.Int("genprofile-rounds", 5, "generate.Generate runs profiled by -genprofile")
	flag.Parse()
	if *quick {
		*rounds, *round, *minOps, *warm, *cold = 5, 5*time.Millisecond, 8, 3, 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

	if *cpuprofile != "" || *memprofile != "" {
		if err := profileMemory(ctx, *cpuprofile, *memprofile); err != nil {
			log("%v", err)
			os.Exit(1)
		}
		return
	}

	if *genprofile != "" {
		root, err := moduleRoot()
		if err == nil {
			var f *os.File
			var cost benchcmp.GenCost
			cost, err = benchcmp.ProfileGen(ctx, root, 1000, *genRounds, func() error {
				var err error
				if f, err = os.Create(*genprofile); err != nil {
					return err
				}
				return pprof.StartCPUProfile(f)
			}, func() { pprof.StopCPUProfile(); f.Close() })
			if err == nil {
				cpu := "not known"
				if cost.CPUKnown {
					cpu = fmt.Sprintf("%.1f ms", float64(cost.CPU)/1e6)
				}
				fmt.Printf("generate.Generate on 1,000 methods, mean of %d: wall %.1f ms, CPU of this process %s (the go command excluded), %.1f MB in %d allocations\n",
					cost.Rounds, float64(cost.Wall)/1e6, cpu, float64(cost.AllocBytes)/1e6, cost.Allocs)
			}
		}
		if err != nil {
			log("%v", err)
			os.Exit(1)
		}
		return
	}

	fmt.Printf("# idemgen benchmarks\n\n%s\n", machine())
	sections := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		sections[strings.TrimSpace(s)] = true
	}
	if sections["runtime"] {
		if err := runRuntime(ctx, log, splitList(*stores), ints(*callersFlag), benchcmp.Config{Rounds: *rounds, Round: *round, Block: *block, BlockConcurrent: *blockConc, MinOps: *minOps, MaxOps: 200000}); err != nil {
			log("runtime: %v", err)
			os.Exit(1)
		}
	}
	if sections["full"] {
		cfg := fullConfig{sizes: ints(*fullSizes), refusals: 20000, replay: 2 * time.Second}
		if *quick {
			cfg.refusals, cfg.replay = 2000, 300*time.Millisecond
		}
		if err := runFull(ctx, os.Stdout, log, cfg, os.Getenv("IDEM_REDIS_ADDR")); err != nil {
			log("full: %v", err)
			os.Exit(1)
		}
	}
	if sections["gen"] {
		root, err := moduleRoot()
		if err != nil {
			log("%v", err)
			os.Exit(1)
		}
		start := time.Now()
		rs, err := benchcmp.RunGen(ctx, benchcmp.GenConfig{Root: root, Sizes: ints(*sizes), WarmRounds: *warm, ColdRounds: *cold, Log: log})
		if err != nil {
			log("generator: %v", err)
			os.Exit(1)
		}
		fmt.Printf("\n## Generator cost\n\nSynthetic packages in a temporary module (replace → this repository), three method shapes in turn. "+
			"Warm: in process, build cache warm, `generate.Generate` and `packages.Load` (same mode, `-tags=idemgen`) alternately, %d pairs (aim ≤ 1.5× up to 100 methods, ≤ 3.5× at 1,000). "+
			"Cold: the prebuilt idemgen binary and `go list -export -deps -tags=idemgen`, each with an empty GOCACHE, alternately, %d pairs. (%s)\n\n",
			*warm, *cold, time.Since(start).Round(time.Second))
		benchcmp.GenTable(os.Stdout, rs)
	}
}

func runRuntime(ctx context.Context, log func(string, ...any), stores []string, callers []int, cfg benchcmp.Config) error {
	dsn, addr := os.Getenv("IDEM_PG_DSN"), os.Getenv("IDEM_REDIS_ADDR")
	env, closeEnv, err := benchcmp.NewEnvMySQL(ctx, dsn, addr, os.Getenv("IDEM_MYSQL_DSN"))
	if err != nil {
		return err
	}
	defer closeEnv()
	start := time.Now()
	var results []benchcmp.GroupResult
	var skipped []string
	for _, c := range callers {
		for _, st := range stores {
			if err := env.Reset(); err != nil {
				return err
			}
			gs, err := env.RuntimeGroups(st, c)
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			if gs == nil && c == callers[0] {
				skipped = append(skipped, st)
			}
			for _, g := range gs {
				log("runtime: %s, %d callers", g.Name, c)
				r, err := benchcmp.Run(g, cfg)
				if err != nil {
					return fmt.Errorf("%s: %w", g.Name, err)
				}
				results = append(results, r)
			}
		}
	}
	fmt.Printf("\n## Runtime cost per call\n\nEach wrapper figure is the generated wrapper of `internal/benchcmp/orders` (`Place`, key `order.ID+op`) "+
		"through `idem.Executor`; each floor does the same store operations by hand with the raw driver (pgx v5, go-redis v9) "+
		"and the same business work (on PostgreSQL and MySQL stores, one `INSERT` into `bench_orders`); the MySQL floors use go-sql-driver/mysql with the statements prepared once per connection, as mysqlstore does, and count round trips on the network. Variants run interleaved in one process: "+
		"%d rounds; within a round each variant makes the same calls (about %v of the wrapper's), alternating call by call "+
		"(in blocks of at least %v for calls too short to time one by one, and of at least %v with several callers), "+
		"the variant that goes first rotating from block to block. **speed** is the median over rounds of floor time ÷ wrapper time "+
		"(≥ 1 is faster than the floor), with the interquartile range of the per-round speeds; a 1-caller cell is steady when both quartiles lie within ±0.1 of its median. "+
		"A replay cell replays keys its store decided; a *replay cold* cell (PostgreSQL, 1 caller) replays keys another store decided, on a store that never saw them, "+
		"as a retry that reaches another process does (pgstore then cannot use the hint of keys it saw final). "+
		"Round trips are counted by a pgx tracer (queries, batches, prepares) and a go-redis hook; "+
		"allocations from runtime.MemStats over one separate cell per variant. On this 2-core machine the 16-caller ratios are indicative. %s (%s)\n\n",
		cfg.Rounds, cfg.Round, cfg.Block, cfg.BlockConcurrent, env.PGDurability()+" "+env.MySQLDurability(), time.Since(start).Round(time.Second))
	if len(skipped) > 0 {
		fmt.Printf("Skipped (no server: set IDEM_PG_DSN / IDEM_REDIS_ADDR / IDEM_MYSQL_DSN, or run through scripts/with-services.sh): %s.\n\n", strings.Join(skipped, ", "))
	}
	benchcmp.RuntimeTable(os.Stdout, results)
	fmt.Printf("\n### Memory: what the wrapper adds\n\n")
	benchcmp.MemoryAimTable(os.Stdout, results)
	if slices.Contains(stores, "postgres") && env.Pool != nil {
		log("runtime: postgres server time")
		start := time.Now()
		rep, err := env.PGServerTime(ctx, 1000)
		if err != nil {
			return fmt.Errorf("postgres server time: %w", err)
		}
		fmt.Printf("\n### PostgreSQL: server time and HOT updates\n\n"+
			"One caller on a pool of its own, wrapper and floor alternating call by call, 1,000 calls per side after 16 to warm up; "+
			"server time is planning plus execution of each side's store statements, from pg_stat_statements (the business INSERT, "+
			"BEGIN and COMMIT are the same on both sides and left out, as is the wait for the commit's WAL flush); updates from "+
			"pg_stat_user_tables over the calls and the warm-up, read once the sessions have ended. %s (%s)\n\n",
			env.PGDurability(), time.Since(start).Round(time.Second))
		benchcmp.PGServerTable(os.Stdout, rep)
	}
	return nil
}

// profileMemory profiles the memory wrapper's first calls and replays.
func profileMemory(ctx context.Context, cpu, mem string) error {
	env, closeEnv, err := benchcmp.NewEnv(ctx, "", "")
	if err != nil {
		return err
	}
	defer closeEnv()
	gs, err := env.RuntimeGroups("memory", 1)
	if err != nil {
		return err
	}
	if mem != "" {
		runtime.MemProfileRate = 1
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, g := range gs {
		v := g.Variants[0]
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if v.Prepare != nil {
				if err := v.Prepare(20000); err != nil {
					return err
				}
			}
			for i := range 20000 {
				if err := v.Op(i); err != nil {
					return err
				}
			}
		}
	}
	if mem != "" {
		f, err := os.Create(mem)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("Machine: %d CPUs (nproc), %s, %s %s/%s, %s.", runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/idemgen/idemgen").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root (run from the repository): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func ints(s string) []int {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %q is not a number\n", p)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}
