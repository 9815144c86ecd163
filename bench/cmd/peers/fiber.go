package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/idemgen/idemgen/internal/benchcmp"
)

// runFiber compares, on one Fiber app and one Redis, runtime/idemfiber with
// Fiber's own idempotency middleware (and Fiber with no idempotency, and
// Fiber's replay floor): the same fasthttp stack on both sides, so that
// the ratio is the idempotency layer's alone.
//
// With replaysOnly, only the replay cells run (for a CPU profile of
// replays alone: -cpuprofile).
func runFiber(ctx context.Context, rounds int, round time.Duration, maxReq int, callersFlag string, replaysOnly bool) error {
	pool, addr, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.close()
		}
	}()
	for _, start := range []func() (*server, error){
		func() (*server, error) { return newIdemfiber(ctx, pool, addr) },
		func() (*server, error) { return newFiber(ctx, pool, addr) },
		func() (*server, error) { return newBareFiber(ctx, pool) },
		func() (*server, error) { return newReplayFloorFiber(addr) },
	} {
		s, err := start()
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	time.Sleep(100 * time.Millisecond) // let the Fiber listeners start
	idemfiberSrv, fiberSrv, bare, floor := servers[0], servers[1], servers[2], servers[3]

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 64, DisableCompression: true,
	}}
	lg := &loadgen{ctx: ctx, client: client}
	fmt.Printf("# idemgen on Fiber\n\nMachine: %d CPUs (nproc), %s, %s. Servers and load generator in one process, over loopback; "+
		"PostgreSQL and Redis are the throwaway servers of scripts/with-services.sh.\n",
		runtime.NumCPU(), cpuModel(), runtime.Version())
	var results []benchcmp.GroupResult
	start := time.Now()
	for _, c := range ints(callersFlag) {
		cfg := benchcmp.Config{Rounds: rounds, Round: round, BlockConcurrent: time.Millisecond, MinOps: max(8, c), MaxOps: maxReq}
		var vs []benchcmp.Variant
		if !replaysOnly {
			firsts := []*server{idemfiberSrv, fiberSrv, bare}
			for _, s := range firsts {
				vs = append(vs, lg.first(s))
			}
			fmt.Fprintf(os.Stderr, "peers: Fiber first requests, %d clients\n", c)
			r, err := benchcmp.Run(benchcmp.Group{Name: "first", Callers: c, Variants: vs}, cfg)
			if err != nil {
				return err
			}
			results = append(results, withRTT(r, lg, firsts, c, cfg, false))
		}
		replayers := []*server{idemfiberSrv, fiberSrv, floor}
		vs = nil
		for _, s := range replayers {
			v, err := lg.replay(s, 256)
			if err != nil {
				return err
			}
			vs = append(vs, v)
		}
		fmt.Fprintf(os.Stderr, "peers: Fiber replays, %d clients\n", c)
		r, err := benchcmp.Run(benchcmp.Group{Name: "replay", Callers: c, Variants: vs}, cfg)
		if err != nil {
			return err
		}
		results = append(results, withRTT(r, lg, replayers, c, cfg, true))
	}
	fmt.Printf("\n## idemfiber against Fiber's idempotency middleware\n\nPOST /orders as in the peers run, on one Fiber v3.1.0 app per peer, "+
		"the same handler, the same Redis. %d rounds of at most %d requests per peer, interleaved. "+
		"**idemfiber speed** is the median over rounds of (peer time ÷ idemfiber time): above 1, idemfiber is faster. (%s)\n\n",
		rounds, maxReq, time.Since(start).Round(time.Second))
	printResults("idemfiber", results)
	return nil
}
