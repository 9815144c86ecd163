// Command dbos compares idemgen with DBOS Transact Go, the durable-workflow
// library a Go team might pick instead, on one idempotent operation: place an
// order, i.e. insert one row into a business table, keyed by the caller's
// order ID. DBOS runs it as a workflow whose workflow ID is the order ID and
// whose one step inserts the row (RunAsStep, as its README does, and
// RunAsTransaction, its exactly-once form); idemgen runs it through the
// generated wrapper of orders.Service.Place on pgstore, in lease mode and in
// transactional mode. Same PostgreSQL server, first calls and replays,
// interleaved call by call in one process, medians of per-round ratios. It
// then checks that no order ran twice and probes what each peer checks.
//
//	cd bench && IDEM_PG_DURABLE=1 ../scripts/with-services.sh go run ./cmd/dbos
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/cmd/dbos/orders"
	"github.com/idemgen/idemgen/internal/benchcmp"
)

func main() {
	rounds := flag.Int("rounds", 31, "rounds per comparison (odd)")
	round := flag.Duration("round", 40*time.Millisecond, "target length of DBOS's share of a round")
	maxOps := flag.Int("max-ops", 400, "at most this many calls per peer per round")
	callersFlag := flag.String("callers", "1,16", "concurrent callers, comma-separated")
	keys := flag.Int("replay-keys", 256, "orders placed before the replays, then replayed in turn")
	timeout := flag.Duration("timeout", 4*time.Minute, "bound on the whole run")
	quick := flag.Bool("quick", false, "few and short rounds, 1 caller (a smoke run)")
	trace := flag.Bool("trace", false, "print the SQL of one first call and one replay of each peer")
	flag.Parse()
	if *quick {
		*rounds, *round, *callersFlag = 5, 15*time.Millisecond, "1"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cfg := benchcmp.Config{Rounds: *rounds, Round: *round, BlockConcurrent: time.Millisecond, MinOps: 16, MaxOps: *maxOps}
	if err := run(ctx, cfg, *callersFlag, *keys, *trace); err != nil {
		fmt.Fprintln(os.Stderr, "dbos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg benchcmp.Config, callersFlag string, keys int, trace bool) (err error) {
	dsn := os.Getenv("IDEM_PG_DSN")
	if dsn == "" {
		return fmt.Errorf("IDEM_PG_DSN must be set: run through scripts/with-services.sh")
	}
	callers, err := ints(callersFlag)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := newEnv(ctx, dsn, 20, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := e.close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	settings, err := pgSettings(ctx, e.idemPool)
	if err != nil {
		return err
	}
	fmt.Printf("# idemgen against DBOS Transact Go\n\nMachine: %d CPUs (nproc), %s, %s; %s. PostgreSQL %s. DBOS Transact Go %s.\n",
		runtime.NumCPU(), cpuModel(), runtime.Version(), loadavg(), settings, moduleVersion("github.com/dbos-inc/dbos-transact-golang"))
	if trace {
		if err := printTrace(ctx, e); err != nil {
			return err
		}
	}

	start := time.Now()
	var results []benchcmp.GroupResult
	refs := []string{dbosStep, dbosTxn}
	for _, c := range callers {
		for _, ref := range refs {
			vs := []benchcmp.Variant{first(ctx, e.peer(ref))}
			for _, name := range []string{idemLease, idemTx} {
				vs = append(vs, first(ctx, e.peer(name)))
			}
			fmt.Fprintf(os.Stderr, "dbos: first calls vs %s, %d callers\n", ref, c)
			r, err := benchcmp.Run(benchcmp.Group{Name: "first", Callers: c, Variants: vs, Counters: counters(e)}, cfg)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	if _, err := e.check(ctx); err != nil {
		return fmt.Errorf("after the first calls: %w", err)
	}
	replays := map[string]benchcmp.Variant{}
	for _, p := range e.peers {
		v, err := replay(ctx, p, keys)
		if err != nil {
			return err
		}
		replays[p.name] = v
	}
	runsBefore := make([]int64, len(e.peers))
	for i, p := range e.peers {
		runsBefore[i] = p.table.Runs.Load()
	}
	for _, c := range callers {
		for _, ref := range refs {
			vs := []benchcmp.Variant{replays[ref], replays[idemLease], replays[idemTx]}
			fmt.Fprintf(os.Stderr, "dbos: replays vs %s, %d callers\n", ref, c)
			r, err := benchcmp.Run(benchcmp.Group{Name: "replay", Callers: c, Variants: vs, Counters: counters(e)}, cfg)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	counts, err := e.check(ctx)
	if err != nil {
		return fmt.Errorf("after the replays: %w", err)
	}
	for i, p := range e.peers {
		if n := p.table.Runs.Load() - runsBefore[i]; n != 0 {
			return fmt.Errorf("%s: %d replays ran the business work again", p.name, n)
		}
	}
	printTable(results, cfg, time.Since(start))
	fmt.Printf("\nChecked after the first calls and again after the replays, by counting each business table's rows and distinct order IDs " +
		"and the executions of the INSERT (the tables have no unique constraint on the order ID, so a second execution would be a second row): ")
	var parts []string
	for i, p := range e.peers {
		parts = append(parts, fmt.Sprintf("%s %d rows = %d orders = %d executions", p.name, counts[i].Rows, counts[i].Keys, counts[i].Runs))
	}
	fmt.Printf("%s; no replay executed anything.\n", strings.Join(parts, "; "))
	return printProbes(ctx, dsn, logger)
}

// counters are the round-trip counters of the two pools.
func counters(e *env) []benchcmp.Counter {
	return []benchcmp.Counter{
		{Name: "dbos", Load: e.peer(dbosStep).rt.load},
		{Name: "idem", Load: e.peer(idemTx).rt.load},
	}
}

// first is p's first calls: a new order per call.
func first(ctx context.Context, p *peer) benchcmp.Variant {
	var batch []*orders.Order
	return benchcmp.Variant{Name: p.name,
		Prepare: func(n int) error {
			batch = make([]*orders.Order, n)
			for i := range batch {
				batch[i] = newOrder()
			}
			return nil
		},
		Op: func(i int) error {
			r, err := p.place(ctx, batch[i])
			if err != nil {
				return err
			}
			return same(r, batch[i])
		}}
}

// replay places k orders, then replays them in turn.
func replay(ctx context.Context, p *peer, k int) (benchcmp.Variant, error) {
	placed := make([]*orders.Order, k)
	for i := range placed {
		placed[i] = newOrder()
		if _, err := p.place(ctx, placed[i]); err != nil {
			return benchcmp.Variant{}, fmt.Errorf("%s: placing a replay key: %w", p.name, err)
		}
	}
	return benchcmp.Variant{Name: p.name, Op: func(i int) error {
		o := placed[i%len(placed)]
		r, err := p.place(ctx, o)
		if err != nil {
			return err
		}
		return same(r, o)
	}}, nil
}

func printTable(results []benchcmp.GroupResult, cfg benchcmp.Config, took time.Duration) {
	fmt.Printf("\n## One idempotent operation: idemgen against DBOS\n\n"+
		"Place an order: one INSERT into a business table, keyed by the caller's order ID (DBOS: the workflow ID, `dbos.WithWorkflowID`; idemgen: `//idem:key=order.ID`). "+
		"A replay is the same call with the same order ID: DBOS returns the workflow's recorded result, idemgen the stored receipt. "+
		"Each DBOS form is measured against both idemgen modes in one group: %d rounds, the peers interleaved call by call "+
		"(with several callers, in blocks of at least 1 ms), the peer that goes first rotating. "+
		"**idemgen speed** is the median over rounds of (DBOS time ÷ idemgen time), with the interquartile range of the per-round ratios: above 1, idemgen is faster. "+
		"Round trips per call are counted by a pgx tracer on each peer's own pool (DBOS: the pool given as `Config.SystemDBPool`, which its data source shares), "+
		"only for the measured call's context: DBOS's background work (queue runner, scheduler, timeouts monitor) is not counted. (%s)\n\n",
		cfg.Rounds, took.Round(time.Second))
	fmt.Println("| call | callers | DBOS | DBOS time/call | idemgen | idemgen time/call | idemgen speed vs DBOS (median of per-round ratios) [IQR] | round trips/call DBOS / idemgen | aim ≥ 2× |")
	fmt.Println("|---|---:|---|---:|---|---:|---|---|---|")
	for _, r := range results {
		if !r.Measured() {
			continue
		}
		ref := r.Variants[0]
		for j := 1; j < len(r.Variants); j++ {
			v := r.Variants[j]
			// Variant 0 is DBOS: Ratio[j] is DBOS time ÷ idemgen time.
			aim := "✗"
			if r.Ratio[j] >= 2 {
				aim = "✓"
			}
			fmt.Printf("| %s | %d | %s | %s | %s | %s | **%.2f×** [%.2f–%.2f] | %.2f / %.2f | %s |\n",
				r.Name, r.Callers, ref.Name, benchcmp.Dur(ref.NsOp), v.Name, benchcmp.Dur(v.NsOp),
				r.Ratio[j], r.Spread[j][0], r.Spread[j][1], ref.PerOp["dbos"], v.PerOp["idem"], aim)
		}
	}
}

func printProbes(ctx context.Context, dsn string, logger *slog.Logger) (err error) {
	e, err := newEnv(ctx, dsn, 20, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := e.close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	fmt.Printf("\n## What each peer checks\n\nProbed on fresh tables: the same order ID again with another amount; two calls with an empty order ID; " +
		"4 concurrent calls with one new order ID, 5 times (a DBOS duplicate polls the workflow's status every second until it ends).\n\n")
	fmt.Println("| peer | same key, another payload | no key | concurrent duplicates |")
	fmt.Println("|---|---|---|---|")
	for _, p := range e.peers {
		f, err := probe(ctx, p, 5, 4)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %s | %s | %s |\n", p.name, f.mismatch(), f.missing(), f.duplicates())
	}
	return nil
}

// printTrace prints the SQL of one first call and one replay of each peer.
func printTrace(ctx context.Context, e *env) error {
	fmt.Printf("\n## The SQL of one call\n\nAs the tracers saw it, after a few calls of each peer; a `prepare:` line is a connection's first use of a statement.\n")
	for _, p := range e.peers {
		for range 3 { // warm the statement caches
			o := newOrder()
			for range 2 {
				if _, err := p.place(ctx, o); err != nil {
					return err
				}
			}
		}
		o := newOrder()
		for _, call := range []string{"first call", "replay"} {
			p.rt.record()
			_, err := p.place(ctx, o)
			sql := p.rt.stop()
			if err != nil {
				return err
			}
			fmt.Printf("\n%s, %s: %d round trips\n\n", p.name, call, len(sql))
			for _, s := range sql {
				fmt.Printf("    %s\n", strings.Join(strings.Fields(s), " "))
			}
		}
	}
	return nil
}

func pgSettings(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var version, fsync, sc, fpw string
	err := pool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')").
		Scan(&version, &fsync, &sc, &fpw)
	if err != nil {
		return "", err
	}
	s := fmt.Sprintf("%s: fsync=%s, synchronous_commit=%s, full_page_writes=%s", version, fsync, sc, fpw)
	if fsync == "on" && sc == "on" && fpw == "on" {
		return s + ", a durable server", nil
	}
	return s + ": **not durable** (set IDEM_PG_DURABLE=1), commits do not wait for the disk", nil
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "unknown CPU"
}

func ints(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(p), &n); err != nil || n < 1 {
			return nil, fmt.Errorf("callers %q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}
