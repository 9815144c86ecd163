// Command peers serves the same small order endpoint with runtime/idemhttp,
// Fiber v3's idempotency middleware and an in-house "SETNX + unique index"
// implementation, all on the same Redis server (and each with its own copy
// of the same PostgreSQL orders table), and drives them over loopback with a
// bounded load generator: first requests and replays at the same
// concurrency, interleaved request by request in short rounds, reported as medians of the
// per-round ratios. It then probes what each peer checks.
//
//	cd bench && ../scripts/with-services.sh go run ./cmd/peers
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/benchcmp"
)

var body = []byte(`{"customer":"c-42","amount":4250,"currency":"EUR"}`)

func main() {
	rounds := flag.Int("rounds", 21, "rounds per comparison")
	round := flag.Duration("round", 30*time.Millisecond, "target length of one peer's share of a round")
	maxReq := flag.Int("max-requests", 2500, "at most this many requests per peer per round")
	timeout := flag.Duration("timeout", 4*time.Minute, "bound on the whole run")
	callersFlag := flag.String("callers", "1,16", "concurrent clients")
	quick := flag.Bool("quick", false, "few and short rounds (a smoke run)")
	fiberOnly := flag.Bool("fiber", false, "only the Fiber stack: runtime/idemfiber against Fiber's idempotency middleware")
	replaysOnly := flag.Bool("replays", false, "with -fiber, only the replay cells")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (servers and load generator) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *quick {
		*rounds, *round = 3, 15*time.Millisecond
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	runFn := run
	if *fiberOnly {
		runFn = func(ctx context.Context, rounds int, round time.Duration, maxReq int, callersFlag string) error {
			return runFiber(ctx, rounds, round, maxReq, callersFlag, *replaysOnly)
		}
	}
	if err := runFn(ctx, *rounds, *round, *maxReq, *callersFlag); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, rounds int, round time.Duration, maxReq int, callersFlag string) error {
	pool, addr, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	idemhttpSrv, err := newIdemhttp(ctx, pool, addr)
	if err != nil {
		return err
	}
	defer idemhttpSrv.close()
	fiberSrv, err := newFiber(ctx, pool, addr)
	if err != nil {
		return err
	}
	defer fiberSrv.close()
	inhouseSrv, err := newInHouse(ctx, pool, addr)
	if err != nil {
		return err
	}
	defer inhouseSrv.close()
	bareHTTP, err := newBareHTTP(ctx, pool)
	if err != nil {
		return err
	}
	defer bareHTTP.close()
	bareFiber, err := newBareFiber(ctx, pool)
	if err != nil {
		return err
	}
	defer bareFiber.close()
	floorHTTP, err := newReplayFloorHTTP(addr)
	if err != nil {
		return err
	}
	defer floorHTTP.close()
	floorFiber, err := newReplayFloorFiber(addr)
	if err != nil {
		return err
	}
	defer floorFiber.close()
	time.Sleep(100 * time.Millisecond) // let the Fiber listeners start

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 64, DisableCompression: true,
	}}
	lg := &loadgen{ctx: ctx, client: client}

	fmt.Printf("# idemgen peers\n\nMachine: %d CPUs (nproc), %s, %s. Servers and load generator in one process, over loopback; "+
		"PostgreSQL and Redis are the throwaway servers of scripts/with-services.sh.\n",
		runtime.NumCPU(), cpuModel(), runtime.Version())

	peers := []*server{idemhttpSrv, fiberSrv, inhouseSrv}
	var results []benchcmp.GroupResult
	start := time.Now()
	for _, c := range ints(callersFlag) {
		cfg := benchcmp.Config{Rounds: rounds, Round: round, BlockConcurrent: time.Millisecond, MinOps: max(8, c), MaxOps: maxReq}
		// First requests: a new key per request.
		var vs []benchcmp.Variant
		for _, s := range append(peers, bareHTTP, bareFiber) {
			vs = append(vs, lg.first(s))
		}
		fmt.Fprintf(os.Stderr, "peers: first requests, %d clients\n", c)
		r, err := benchcmp.Run(benchcmp.Group{Name: "first", Callers: c, Variants: vs, Counters: nil}, cfg)
		if err != nil {
			return err
		}
		results = append(results, withRTT(r, lg, append(peers, bareHTTP, bareFiber), c, cfg, false))
		// Replays: 256 keys stored first, each then replayed.
		vs = nil
		replayers := append(slices.Clone(peers), floorHTTP, floorFiber)
		for _, s := range replayers {
			v, err := lg.replay(s, 256)
			if err != nil {
				return err
			}
			vs = append(vs, v)
		}
		fmt.Fprintf(os.Stderr, "peers: replays, %d clients\n", c)
		r, err = benchcmp.Run(benchcmp.Group{Name: "replay", Callers: c, Variants: vs}, cfg)
		if err != nil {
			return err
		}
		results = append(results, withRTT(r, lg, replayers, c, cfg, true))
	}
	fmt.Printf("\n## Throughput against peers\n\nPOST /orders (a 50-byte JSON order; the handler INSERTs one row into PostgreSQL and answers 201 with JSON), "+
		"keep-alive HTTP/1.1 clients. %d rounds of at most %d requests per peer, the peers interleaved request by request "+
		"(with several clients, in blocks of at least 1 ms), the peer that goes first rotating. "+
		"**idemhttp speed** is the median over rounds of (peer time ÷ idemhttp time): above 1, idemhttp is faster. "+
		"Round trips per request are counted with a go-redis hook on each peer's own client. "+
		"The two replay floors answer the stored body after one Redis GET, with no check at all: "+
		"idemhttp against the net/http floor is the cost of its checks and its store, "+
		"the net/http floor against the Fiber floor the cost of the HTTP stack. (%s)\n\n",
		rounds, maxReq, time.Since(start).Round(time.Second))
	printResults("idemhttp", results)

	fmt.Printf("\n## What each peer checks\n\nProbed on the running servers (a second instance of each peer shares its Redis and table for the concurrent-duplicate probe).\n\n")
	return probes(ctx, lg, pool, addr, peers)
}

// connect opens a pool on the PostgreSQL server of scripts/with-services.sh
// and returns it with the Redis server's address.
func connect(ctx context.Context) (*pgxpool.Pool, string, error) {
	dsn, addr := os.Getenv("IDEM_PG_DSN"), os.Getenv("IDEM_REDIS_ADDR")
	if dsn == "" || addr == "" {
		return nil, "", fmt.Errorf("IDEM_PG_DSN and IDEM_REDIS_ADDR must be set: run through scripts/with-services.sh")
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", err
	}
	pcfg.MaxConns, pcfg.MinConns = 20, 16
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	return pool, addr, err
}

// printResults prints the groups' table; speeds are against the first
// variant of each group, who.
func printResults(who string, results []benchcmp.GroupResult) {
	fmt.Printf("| requests | clients | peer | time/request | %s speed vs peer (median of pairs) [IQR] | Redis round trips/request |\n", who)
	fmt.Println("|---|---:|---|---:|---|---:|")
	for _, r := range results {
		for j, v := range r.Variants {
			speed := "—"
			if j > 0 {
				speed = fmt.Sprintf("**%.2f×** [%.2f–%.2f]", 1/r.Ratio[j], 1/r.Spread[j][1], 1/r.Spread[j][0])
			}
			rtt := "—"
			if n, ok := v.PerOp["redis"]; ok {
				rtt = fmt.Sprintf("%.2f", n)
			}
			fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", r.Name, r.Callers, v.Name, benchcmp.Dur(v.NsOp), speed, rtt)
		}
	}
}

// withRTT measures Redis round trips per request of each server on a short
// sequential burst (the counters are per server, so any burst will do).
func withRTT(r benchcmp.GroupResult, lg *loadgen, servers []*server, callers int, cfg benchcmp.Config, replay bool) benchcmp.GroupResult {
	for j, s := range servers {
		if s.rtt == nil {
			continue
		}
		var v benchcmp.Variant
		if replay {
			v, _ = lg.replay(s, 16)
		} else {
			v = lg.first(s)
		}
		n := 64
		if v.Prepare != nil {
			_ = v.Prepare(n)
		}
		before := s.rtt.Load()
		for i := range n {
			_ = v.Op(i)
		}
		r.Variants[j].PerOp["redis"] = float64(s.rtt.Load()-before) / float64(n)
	}
	return r
}

type loadgen struct {
	ctx    context.Context
	client *http.Client
}

func (lg *loadgen) post(url, key string, payload []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(lg.ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := lg.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

func (lg *loadgen) first(s *server) benchcmp.Variant {
	var keys []string
	return benchcmp.Variant{Name: s.name,
		Prepare: func(n int) error {
			keys = make([]string, n)
			for i := range keys {
				keys[i] = uuid.NewString()
			}
			return nil
		},
		Op: func(i int) error {
			st, b, _, err := lg.post(s.url, keys[i], body)
			if err == nil && st != http.StatusCreated {
				err = fmt.Errorf("status %d: %s", st, b)
			}
			return err
		}}
}

func (lg *loadgen) replay(s *server, k int) (benchcmp.Variant, error) {
	keys := make([]string, k)
	for i := range keys {
		keys[i] = uuid.NewString()
		if st, b, _, err := lg.post(s.url, keys[i], body); err != nil || st != http.StatusCreated {
			return benchcmp.Variant{}, fmt.Errorf("%s: seeding a replay key: %d %s %v", s.name, st, b, err)
		}
	}
	return benchcmp.Variant{Name: s.name, Op: func(i int) error {
		st, b, _, err := lg.post(s.url, keys[i%len(keys)], body)
		if err == nil && st != http.StatusCreated {
			err = fmt.Errorf("status %d: %s", st, b)
		}
		return err
	}}, nil
}

// probes checks, on each peer: a replay of the same key with another body;
// a request without a key; and concurrent duplicates sent to two instances
// that share the Redis server and the table.
func probes(ctx context.Context, lg *loadgen, pool *pgxpool.Pool, addr string, peers []*server) error {
	seconds := []func() (*server, error){
		func() (*server, error) { return newIdemhttp(ctx, pool, addr) },
		func() (*server, error) { return newFiber(ctx, pool, addr) },
		func() (*server, error) { return newInHouse(ctx, pool, addr) },
	}
	tables := []string{"peer_orders_idemhttp", "peer_orders_fiber", "peer_orders_inhouse"}
	fmt.Println("| peer | same key, another body | no Idempotency-Key | 2 instances, same key at once (20 trials): handler runs | statuses seen |")
	fmt.Println("|---|---|---|---|---|")
	for i, s := range peers {
		key := uuid.NewString()
		st1, b1, _, err := lg.post(s.url, key, body)
		if err != nil {
			return err
		}
		st2, b2, _, err := lg.post(s.url, key, []byte(`{"customer":"c-42","amount":999999,"currency":"EUR"}`))
		if err != nil {
			return err
		}
		mismatch := fmt.Sprintf("%d", st2)
		switch {
		case st2 == st1 && bytes.Equal(b1, b2):
			mismatch += ": replays the first response (not compared)"
		case st2 == http.StatusUnprocessableEntity:
			mismatch += ": rejected (payload compared)"
		}
		before := countRows(ctx, pool, tables[i])
		stNo, _, _, err := lg.post(s.url, "", body)
		if err != nil {
			return err
		}
		missing := fmt.Sprintf("%d", stNo)
		if countRows(ctx, pool, tables[i]) > before {
			missing += ": runs without idempotency"
		} else {
			missing += ": refused"
		}

		second, err := seconds[i]()
		if err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		const trials = 20
		statuses := map[int]int{}
		execs := 0
		runs.on.Store(true)
		for range trials {
			key := uuid.NewString()
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, url := range []string{s.url, second.url} {
				wg.Go(func() {
					st, _, _, err := lg.post(url, key, body)
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						statuses[st]++
					}
				})
			}
			wg.Wait()
			runs.mu.Lock()
			execs += runs.m[key]
			runs.mu.Unlock()
		}
		runs.on.Store(false)
		second.close()
		var sts []string
		for st, n := range statuses {
			sts = append(sts, fmt.Sprintf("%d×%d", n, st))
		}
		fmt.Printf("| %s | %s | %s | %d for %d keys | %s |\n", s.name, mismatch, missing, execs, trials, strings.Join(sortStrings(sts), ", "))
	}
	fmt.Println("\nHandler runs are counted in the handler, before its INSERT. The orders tables have a unique index on the key, so a second run " +
		"cannot commit a second row: it fails with a unique violation (500) — without that index, it would be a second order.")
	return nil
}

func countRows(ctx context.Context, pool *pgxpool.Pool, table string) int {
	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			return strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
		}
	}
	return "unknown CPU"
}

func ints(s string) []int {
	var out []int
	for _, p := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(p), &n); err == nil {
			out = append(out, n)
		}
	}
	return out
}
