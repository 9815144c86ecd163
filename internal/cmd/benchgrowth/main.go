// Command benchgrowth measures how pgstore grows: the latency of a first
// call (Claim and Complete of a new key) and of a replay (Claim of a random
// live key) on a table of 10⁴ records and on one grown to 10⁵, 10⁶ and 10⁷
// records, as ratios to the 10⁴ table measured in the same run (the two
// tables alternate call by call, so the load of the machine falls on both),
// for the plain table and the partitioned mode (pgstore.WithPartitions);
// the latency of first calls while expiry removes a tenth of the records
// beside them (row by row in the plain table, whole partitions in the
// partitioned one), by a bare loop of Sweep and by the paced idem.Sweeper
// of each -paced setting, each against a window of the same calls without
// it; and the bytes each record costs (heap, primary key, other indexes).
//
//	IDEM_PG_DURABLE=1 scripts/with-services.sh go run ./internal/cmd/benchgrowth [-max-records N] [-min-records N] [-paced 1000:0.05:0s,...] [-quick]
//
// Records are loaded with COPY: final outcomes of a 200-byte body, their
// expiries spread over the TTL. Each size adds a tenth more records that
// expired already, for the sweep to remove. PostgreSQL comes from
// $IDEM_PG_DSN; the server's settings are printed with the results, and a
// server without fsync is said to be one.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/sweepbench"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

const (
	bodyLen  = 200
	op       = "orders.Pay"
	baseSize = 10_000
)

type config struct {
	maxRecords int
	samples    int
	ttl        time.Duration
	interval   time.Duration
	layouts    []string
	keep       bool
	window     time.Duration
	minRecords int
	paced      []sweepbench.Pacing
}

func main() {
	var c config
	flag.IntVar(&c.maxRecords, "max-records", 1_000_000, "largest table (10⁴, 10⁵, 10⁶, 10⁷ up to it)")
	flag.IntVar(&c.samples, "samples", 1500, "calls per table, per kind of call and size")
	flag.DurationVar(&c.ttl, "ttl", 24*time.Hour, "TTL of the records")
	flag.DurationVar(&c.interval, "interval", 3*time.Hour, "partition interval of the partitioned mode")
	layouts := flag.String("layouts", "plain,partitioned", "layouts to measure")
	flag.BoolVar(&c.keep, "keep", false, "keep the tables at the end")
	flag.DurationVar(&c.window, "sweep-window", 10*time.Second, "least length of each window of first calls beside expiry (and without it)")
	flag.IntVar(&c.minRecords, "min-records", baseSize, "smallest grown table measured")
	paced := flag.String("paced", sweepbench.DefaultPacing,
		"paced sweepers to measure, batch:duty:pause separated by commas (idem.WithSweepBatch, WithSweepDutyCycle, WithSweepPause)")
	quick := flag.Bool("quick", false, "up to 10⁵ records and 200 samples (a smoke run, well under a minute)")
	flag.Parse()
	if *quick {
		c.maxRecords, c.samples, c.window = min(c.maxRecords, 100_000), 200, 2*time.Second
	}
	c.layouts = strings.Split(*layouts, ",")
	var err error
	if c.paced, err = sweepbench.ParsePacing(*paced); err != nil {
		fmt.Fprintf(os.Stderr, "benchgrowth: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "benchgrowth: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	if c.maxRecords < baseSize {
		return fmt.Errorf("-max-records %d: at least %d", c.maxRecords, baseSize)
	}
	for _, l := range c.layouts {
		if l != "plain" && l != "partitioned" {
			return fmt.Errorf("-layouts: %q is neither plain nor partitioned", l)
		}
	}
	if c.ttl < 8*time.Hour {
		return fmt.Errorf("-ttl %v: at least 8h (loaded records expire no sooner than TTL/8, after the run)", c.ttl)
	}
	if c.window <= 0 {
		return fmt.Errorf("-sweep-window %v: must be > 0", c.window)
	}
	if c.minRecords < baseSize || c.minRecords > c.maxRecords {
		return fmt.Errorf("-min-records %d: between %d and -max-records", c.minRecords, baseSize)
	}
	if c.samples < 100 {
		return fmt.Errorf("-samples %d: at least 100 (a p99 needs them)", c.samples)
	}
	dsn := os.Getenv("IDEM_PG_DSN")
	if dsn == "" {
		return errors.New("IDEM_PG_DSN is not set: run under scripts/with-services.sh (IDEM_PG_DURABLE=1 for a durable server)")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := printSettings(ctx, pool); err != nil {
		return err
	}
	var sizes []int
	for n := baseSize; n <= c.maxRecords; n *= 10 {
		if n < c.minRecords {
			continue
		}
		sizes = append(sizes, n)
	}
	fmt.Printf("\nrecords: a 200-byte outcome, TTL %v; partitioned: interval %v; %d calls per table, kind and size; 1 caller, lease mode\n",
		c.ttl, c.interval, c.samples)
	fmt.Printf("expiry windows ≥ %v; paced sweepers (batch:duty cycle:pause): %v\n\n", c.window, c.paced)
	for _, layout := range c.layouts {
		r, err := runLayout(ctx, pool, c, layout, sizes)
		printResults(r) // what was measured, even when a later size failed
		if err != nil {
			return fmt.Errorf("%s: %w", layout, err)
		}
	}
	return nil
}

func printSettings(ctx context.Context, pool *pgxpool.Pool) error {
	names := []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers",
		"effective_cache_size", "max_wal_size", "checkpoint_timeout", "work_mem", "autovacuum"}
	var vals []string
	for _, n := range names {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", n).Scan(&v); err != nil {
			return fmt.Errorf("setting %s: %w", n, err)
		}
		vals = append(vals, n+"="+v)
	}
	fmt.Printf("PostgreSQL: %s\n", strings.Join(vals, " "))
	var fsync string
	_ = pool.QueryRow(ctx, "SELECT current_setting('fsync')").Scan(&fsync)
	if fsync != "on" {
		fmt.Println("WARNING: fsync is off: not a durable server (run with IDEM_PG_DURABLE=1)")
	}
	return nil
}

// table is one table of a layout and the records it holds.
type table struct {
	name   string
	store  *pgstore.Store
	tenant string
	live   int // records 0..live-1 of tenant are live
	rows   int // rows in the table (live, first calls, expired not yet swept)
	next   int // first calls so far
	exp    int // expired records loaded so far
	swept  int // expired records 0..swept-1 were swept
}

type result struct {
	layout  string
	records int
	first   [2]stats // base, grown
	replay  [2]stats
	sweep   *sweepResult
	bytes   sizes
	loadDur time.Duration
	loaded  int
	rows    int // rows of the grown table when its size was measured
}

type sweepResult struct {
	runs []expiry
}

// expiry is one expiry of the expired tenth and the first calls of the
// window that began with it.
type expiry struct {
	mode        string // loop or paced
	without     stats  // first calls on the grown table in the window without expiry just before
	baseNo      stats  // the same on the 10⁴ table
	callsNo     int    // first calls on the grown table in that window
	removed     int
	dur         time.Duration // the expiry's
	window      time.Duration // the window's: at least -sweep-window and dur
	wal         int64
	with        stats // first calls on the grown table in the window
	baseWith    stats // the same on the 10⁴ table
	calls       int
	withDuring  stats // first calls on the grown table while expiry ran
	callsDuring int
}

type stats struct{ p50, p99 time.Duration }

func summarize(d []time.Duration) stats {
	p50, p99 := sweepbench.Percentiles(d)
	return stats{p50, p99}
}

func runLayout(ctx context.Context, pool *pgxpool.Pool, c config, layout string, sizes []int) ([]result, error) {
	mk := func(name string) (*table, error) {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+name+" CASCADE"); err != nil {
			return nil, err
		}
		opts := []pgstore.Option{pgstore.WithTable(name)}
		if layout == "partitioned" {
			opts = append(opts, pgstore.WithPartitions(c.interval))
		}
		s := pgstore.New(pool, opts...)
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		t := &table{name: name, store: s, tenant: name}
		// A first call makes the store create the partitions its TTL
		// needs, which the loaded records need too.
		_, err := firstCall(ctx, c, t)
		return t, err
	}
	base, err := mk("growth_" + layout + "_base")
	if err != nil {
		return nil, err
	}
	grown, err := mk("growth_" + layout)
	if err != nil {
		return nil, err
	}
	if !c.keep {
		defer func() {
			for _, t := range []*table{base, grown} {
				_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+t.name+" CASCADE")
			}
		}()
	}
	if _, err := load(ctx, pool, c, layout, base, baseSize, 0); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var out []result
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "benchgrowth: %s: loading %d records (%d expired)\n", layout, n-grown.live, n/10-grown.exp)
		start := time.Now()
		loaded, err := load(ctx, pool, c, layout, grown, n, n/10)
		if err != nil {
			return out, err
		}
		r := result{layout: layout, records: n, loadDur: time.Since(start), loaded: loaded}
		if _, err := pool.Exec(ctx, "ANALYZE "+grown.name); err != nil {
			return out, err
		}
		r.rows = grown.rows
		if r.bytes, err = measureSizes(ctx, pool, layout, grown); err != nil {
			return out, err
		}
		fmt.Fprintf(os.Stderr, "benchgrowth: %s %d: measuring\n", layout, n)
		tables := [2]*table{base, grown}
		var first, replay [2][]time.Duration
		for i := range c.samples {
			for j := range 2 {
				t := tables[(i+j)%2]
				k := (i + j) % 2
				d, err := firstCall(ctx, c, t)
				if err != nil {
					return out, err
				}
				first[k] = append(first[k], d)
				d, err = replayCall(ctx, t, rng)
				if err != nil {
					return out, err
				}
				replay[k] = append(replay[k], d)
			}
		}
		for k := range 2 {
			r.first[k], r.replay[k] = summarize(first[k]), summarize(replay[k])
		}
		if r.sweep, err = sweepBeside(ctx, pool, c, layout, base, grown); err != nil {
			return out, err
		}
		out = append(out, r)
		fmt.Fprintf(os.Stderr, "benchgrowth: %s %d: first p50 %s, p99 %s; replay p50 %s, p99 %s\n",
			layout, n, ratio(r.first[1].p50, r.first[0].p50), ratio(r.first[1].p99, r.first[0].p99),
			ratio(r.replay[1].p50, r.replay[0].p50), ratio(r.replay[1].p99, r.replay[0].p99))
		for _, e := range r.sweep.runs {
			fmt.Fprintf(os.Stderr, "benchgrowth: %s %d: %s expiry of %d in %.2fs, claim p99 %s (%d calls)\n",
				layout, n, e.mode, e.removed, e.dur.Seconds(), ratio(e.with.p99, e.without.p99), e.calls)
		}
	}
	return out, nil
}

// pastPartitions creates the partitions of the last 12 intervals (those a
// sweep dropped, again), where the loader puts the records that expired
// already.
func pastPartitions(ctx context.Context, pool *pgxpool.Pool, name string, interval time.Duration) error {
	iv := int64(interval / time.Second)
	now := time.Now().Unix()
	top := (now / iv) * iv
	for lo := top - 12*iv; lo < top; lo += iv {
		from, to := time.Unix(lo, 0).UTC().Format(time.RFC3339), time.Unix(lo+iv, 0).UTC().Format(time.RFC3339)
		sql := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s_past_%d PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s') WITH (fillfactor = 80)",
			name, lo, name, from, to)
		if _, err := pool.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

func keyOf(tenant string, i int) idem.Key {
	k, err := idem.NewKey(tenant, op, fmt.Sprintf("order-%09d", i))
	if err != nil {
		panic(err) // unreachable: tenant and parts are never empty
	}
	return k
}

func fpOf(k idem.Key) idem.Fingerprint { return sha256.Sum256(k.ID[:]) }

func bodyOf(k idem.Key) []byte {
	b := make([]byte, bodyLen)
	for i := 0; i < bodyLen; i += 32 {
		copy(b[i:], k.ID[:])
	}
	return b
}

// load grows t to live records and expired records, with COPY; the live
// ones expire over the last seven eighths of the TTL from now, the expired
// ones expired over the last 12 intervals (in partitions of the past, in
// the partitioned mode).
func load(ctx context.Context, pool *pgxpool.Pool, c config, layout string, t *table, live, expired int) (int, error) {
	if layout == "partitioned" && expired > t.exp {
		if err := pastPartitions(ctx, pool, t.name, c.interval); err != nil {
			return 0, err
		}
	}
	now := time.Now()
	type rec struct {
		k       idem.Key
		expires time.Time
		part    time.Time
	}
	n := (live - t.live) + (expired - t.exp)
	i, e := t.live, t.exp
	rng := rand.New(rand.NewPCG(uint64(live), uint64(expired)))
	next := func() (rec, bool) {
		switch {
		case i < live:
			k := keyOf(t.tenant, i)
			i++
			// Expiries spread over the TTL, but not in its first eighth, so
			// that no loaded record expires while the benchmark runs.
			exp := now.Add(c.ttl/8 + time.Duration(rng.Int64N(int64(c.ttl-c.ttl/8))))
			return rec{k, exp, exp.Add(c.interval)}, true
		case e < expired:
			k := keyOf(t.tenant+"-expired", e)
			e++
			// part_at in the past 12 intervals, but before the current one.
			iv := int64(c.interval / time.Second)
			top := (now.Unix() / iv) * iv
			part := time.Unix(top-1-rng.Int64N(11*iv), 0)
			return rec{k, part.Add(-time.Duration(rng.Int64N(int64(c.interval)))), part}, true
		}
		return rec{}, false
	}
	cols := []string{"key", "token", "lease_until", "expires_at", "created_at", "scheme", "status", "fingerprint",
		"tenant", "op", "key_text", "body"}
	if layout == "partitioned" {
		cols = append(cols, "part_at")
	} else {
		cols = append(cols, "sweep_at")
	}
	src := pgx.CopyFromFunc(func() ([]any, error) {
		r, ok := next()
		if !ok {
			return nil, nil
		}
		fp := fpOf(r.k)
		created := r.expires.Add(-c.ttl)
		tok := int64(binary.BigEndian.Uint64(r.k.ID[8:16]))
		last := r.expires // sweep_at: the expiry
		if layout == "partitioned" {
			last = r.part
		}
		return []any{r.k.ID[:], tok, created.Add(time.Second), r.expires, created, int32(1), int16(idem.StatusSucceeded),
			fp[:], []byte(r.k.Tenant), []byte(r.k.Op), []byte(r.k.Text), bodyOf(r.k), last}, nil
	})
	got, err := pool.CopyFrom(ctx, pgx.Identifier{t.name}, cols, src)
	if err != nil {
		return 0, fmt.Errorf("copy into %s: %w", t.name, err)
	}
	if int(got) != n {
		return 0, fmt.Errorf("copy into %s: %d rows, want %d", t.name, got, n)
	}
	t.rows += n
	t.live, t.exp = live, expired
	return n, nil
}

// firstCall claims a new key and stores its outcome.
func firstCall(ctx context.Context, c config, t *table) (time.Duration, error) {
	k := keyOf(t.tenant+"-new", t.next)
	t.next++
	req := idem.ClaimRequest{Key: k, Fingerprint: fpOf(k), Token: idem.Token(rand.Uint64() | 1), Lease: 30 * time.Second, TTL: c.ttl}
	start := time.Now()
	cl, err := t.store.Claim(ctx, req)
	if err != nil {
		return 0, err
	}
	if !cl.Claimed {
		return 0, fmt.Errorf("first call on %s: key %s not claimed", t.name, k)
	}
	if err := t.store.Complete(ctx, k, req.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: bodyOf(k)}, c.ttl); err != nil {
		return 0, err
	}
	d := time.Since(start)
	t.rows++
	return d, nil
}

// replayCall claims a random live key, which replays its outcome.
func replayCall(ctx context.Context, t *table, rng *rand.Rand) (time.Duration, error) {
	k := keyOf(t.tenant, rng.IntN(t.live))
	req := idem.ClaimRequest{Key: k, Fingerprint: fpOf(k), Token: idem.Token(rng.Uint64() | 1), Lease: 30 * time.Second, TTL: time.Hour}
	start := time.Now()
	cl, err := t.store.Claim(ctx, req)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if cl.Claimed || cl.Record.Status != idem.StatusSucceeded || len(cl.Record.Outcome.Body) != bodyLen {
		return 0, fmt.Errorf("replay on %s: key %s did not replay its outcome", t.name, k)
	}
	return d, nil
}

// sweepBeside measures first calls on the grown table (and the base one,
// alternating), for each kind of expiry of the expired tenth, through a
// window of fixed length without expiry, then through one that starts with
// the expiry and lasts at least as long as it does (the expired tenth is
// loaded again before each but the first): "loop", Sweep(DefaultSweepBatch) again and
// again until done, as a bare loop that fell behind does (in partitioned
// mode one Sweep drops every partition of the past); then "paced", an
// idem.Sweeper with each of the settings of -paced, its rounds back to
// back until one ends with nothing left.
func sweepBeside(ctx context.Context, pool *pgxpool.Pool, c config, layout string, base, grown *table) (*sweepResult, error) {
	r := &sweepResult{}
	type sample struct {
		d      time.Duration
		during bool
	}
	// calls runs first calls, alternating, until the window has passed and
	// done (if any) is closed; a call is during the expiry if done was
	// open when it began.
	calls := func(done <-chan struct{}) (b, g []sample, err error) {
		err = sweepbench.Window(c.window, done, func(during bool) error {
			d, err := firstCall(ctx, c, base)
			if err != nil {
				return err
			}
			b = append(b, sample{d, during})
			if d, err = firstCall(ctx, c, grown); err != nil {
				return err
			}
			g = append(g, sample{d, during})
			return nil
		})
		return b, g, err
	}
	pick := func(ss []sample, duringOnly bool) []time.Duration {
		var out []time.Duration
		for _, s := range ss {
			if s.during || !duringOnly {
				out = append(out, s.d)
			}
		}
		return out
	}
	pending := grown.exp - grown.swept // expired records loaded and not swept yet
	modes := []string{"loop"}
	for _, p := range c.paced {
		modes = append(modes, "paced "+p.String())
	}
	for i, mode := range modes {
		if i > 0 {
			// As many expired records again (keys swept already), for
			// this expiry to remove.
			exp := grown.exp
			grown.exp = 0
			if _, err := load(ctx, pool, c, layout, grown, grown.live, pending); err != nil {
				return nil, err
			}
			grown.exp = exp
		}
		// Every expiry starts from the same state: the table vacuumed
		// and analyzed, a few seconds for the server to settle, and a
		// window of calls without expiry, its own baseline. (A CHECKPOINT
		// here made the baseline the slowest window: every first touch of
		// an index page after it writes the page's full image.)
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+grown.name); err != nil {
			return nil, err
		}
		if err := (idem.SystemClock{}).Sleep(ctx, 3*time.Second); err != nil {
			return nil, err
		}
		b, g, err := calls(nil)
		if err != nil {
			return nil, err
		}
		e := expiry{mode: mode, baseNo: summarize(pick(b, false)), without: summarize(pick(g, false)), callsNo: len(g)}
		var lsn0 string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
			return nil, err
		}
		done := make(chan struct{})
		errc := make(chan error, 1)
		start := time.Now()
		go func() {
			defer close(done)
			var err error
			if i > 0 {
				e.removed, err = sweepbench.Paced(ctx, c.paced[i-1], grown.store)
			} else {
				e.removed, err = sweepbench.Loop(ctx, grown.store, pgstore.DefaultSweepBatch)
			}
			e.dur = time.Since(start)
			errc <- err
		}()
		b, g, err = calls(done)
		<-done
		if err != nil {
			return nil, err
		}
		if err := <-errc; err != nil {
			return nil, fmt.Errorf("%s expiry: %w", mode, err)
		}
		if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn0).Scan(&e.wal); err != nil {
			return nil, err
		}
		e.window = time.Since(start)
		e.baseWith, e.with, e.calls = summarize(pick(b, false)), summarize(pick(g, false)), len(g)
		during := pick(g, true)
		e.withDuring, e.callsDuring = summarize(during), len(during)
		grown.rows -= e.removed
		grown.swept = grown.exp
		r.runs = append(r.runs, e)
	}
	return r, nil
}

type sizes struct{ heap, pk, other int64 }

// measureSizes returns the grown table's heap, primary key and other index
// sizes (summed over its partitions).
func measureSizes(ctx context.Context, pool *pgxpool.Pool, layout string, t *table) (sizes, error) {
	var s sizes
	if layout == "partitioned" {
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(relid)), 0)::bigint, coalesce(sum(pg_indexes_size(relid)), 0)::bigint
FROM pg_partition_tree($1::regclass) WHERE isleaf`, t.name).Scan(&s.heap, &s.other)
		return s, err
	}
	err := pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass), coalesce((SELECT pg_relation_size(conindid) FROM pg_constraint
	WHERE conrelid = $1::regclass AND contype = 'p'), 0), pg_indexes_size($1::regclass)`, t.name).Scan(&s.heap, &s.pk, &s.other)
	s.other -= s.pk
	return s, err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

func printResults(rs []result) {
	fmt.Println("## Latency against the 10⁴-record table (ms; ratio = grown / 10⁴, alternating call by call)")
	fmt.Println()
	fmt.Println("| layout | records | first call p50 (10⁴ / grown) | ratio | first call p99 | ratio | replay p50 | ratio | replay p99 | ratio |")
	fmt.Println("|---|---:|---|---:|---|---:|---|---:|---|---:|")
	for _, r := range rs {
		fmt.Printf("| %s | %d | %s / %s | %s | %s / %s | %s | %s / %s | %s | %s / %s | %s |\n", r.layout, r.records,
			ms(r.first[0].p50), ms(r.first[1].p50), ratio(r.first[1].p50, r.first[0].p50),
			ms(r.first[0].p99), ms(r.first[1].p99), ratio(r.first[1].p99, r.first[0].p99),
			ms(r.replay[0].p50), ms(r.replay[1].p50), ratio(r.replay[1].p50, r.replay[0].p50),
			ms(r.replay[0].p99), ms(r.replay[1].p99), ratio(r.replay[1].p99, r.replay[0].p99))
	}
	fmt.Println()
	fmt.Println("## First calls while expiry removes the expired tenth (ms; loop: Sweep(1000) again and again, one Sweep when")
	fmt.Println("## partitioned; paced: idem.Sweeper; window: from the expiry's start, at least -sweep-window and the expiry)")
	fmt.Println()
	fmt.Println("| layout | records | expiry | removed | took | rows/s | WAL | window | calls without / in window / during | p50 without / with | p99 without / with | p99 ratio (aim ≤ 1.5×) | p99 during | 10⁴ table p99 without / with |")
	fmt.Println("|---|---:|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|")
	for _, r := range rs {
		s := r.sweep
		if s == nil {
			continue
		}
		for _, e := range s.runs {
			fmt.Printf("| %s | %d | %s | %d | %.2fs | %.0f | %.1f MiB | %.1fs | %d / %d / %d | %s / %s | %s / %s | %s | %s | %s / %s |\n",
				r.layout, r.records, e.mode, e.removed, e.dur.Seconds(), float64(e.removed)/e.dur.Seconds(), float64(e.wal)/(1<<20),
				e.window.Seconds(), e.callsNo, e.calls, e.callsDuring, ms(e.without.p50), ms(e.with.p50), ms(e.without.p99), ms(e.with.p99),
				ratio(e.with.p99, e.without.p99), ratio(e.withDuring.p99, e.without.p99), ms(e.baseNo.p99), ms(e.baseWith.p99))
		}
	}
	fmt.Println()
	fmt.Println("## Bytes per row of the grown table, before the sweep (200-byte outcome; rows = live + expired + first calls)")
	fmt.Println()
	fmt.Println("| layout | records | rows | heap | primary key | other indexes | total | load (COPY) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		rows := r.rows
		per := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/float64(rows)) }
		fmt.Printf("| %s | %d | %d | %s | %s | %s | %s | %d rows in %.1fs (%.0f/s) |\n", r.layout, r.records, rows,
			per(r.bytes.heap), per(r.bytes.pk), per(r.bytes.other), per(r.bytes.heap+r.bytes.pk+r.bytes.other),
			r.loaded, r.loadDur.Seconds(), float64(r.loaded)/r.loadDur.Seconds())
	}
}
