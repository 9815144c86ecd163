//go:build soak

package gateway

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// soakBackend is a non-idempotent backend whose behaviour each request
// chooses by its body: "ok" answers 201, "slow" answers 201 after a few
// milliseconds, "fail" answers 500 without acting, "break" acts and then
// breaks the connection. effects counts, per Idempotency-Key, the
// requests it acted on: the soak's invariant is at most one per key.
type soakBackend struct {
	mu      sync.Mutex
	effects map[string]int
}

func (b *soakBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get(idemhttp.Header)
	kind := string(body)
	if kind == "fail" {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	b.mu.Lock()
	b.effects[key]++
	n := b.effects[key]
	b.mu.Unlock()
	switch kind {
	case "slow":
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // load shape, not a pass/fail condition
	case "break":
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "%s %d", key, n)
}

// openFDs counts the process's open file descriptors (Linux), or -1.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

type usage struct {
	goroutines, fds int
	heap            uint64
}

func measure() usage {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{goroutines: runtime.NumGoroutine(), fds: openFDs(), heap: ms.HeapAlloc}
}

// TestSoakGateway runs the gateway in front of a real backend on loopback
// under a bounded load (workers × keys, retries, slow, failing and broken
// upstream requests) for IDEM_SOAK_DURATION (default 1m; make soak-gateway,
// which passes the build tag soak that this file needs), then checks that every key's backend effects are at most
// one, and that goroutines, file descriptors and heap came back to where
// they were after the warm-up.
func TestSoakGateway(t *testing.T) {
	d := time.Minute
	if v := os.Getenv("IDEM_SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("IDEM_SOAK_DURATION=%q: want a positive duration", v)
		}
	}
	workers := 16
	b := &soakBackend{effects: map[string]int{}}
	backend := httptest.NewUnstartedServer(b)
	backend.Config.ErrorLog = discardStdLog()
	backend.Start()
	t.Cleanup(backend.Close)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant",
		"-log-level", "error", "-wait", "2s", "-upstream-timeout", "5s")
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	client := &http.Client{Transport: tr, Timeout: time.Minute} // a hang guard
	kinds := []string{"ok", "ok", "ok", "slow", "slow", "fail", "break"}
	var sent, answered atomic.Int64
	statuses := sync.Map{}
	load := func(ctx context.Context, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			key := fmt.Sprintf("k-%d-%d", seed, rng.IntN(1<<20))
			kind := kinds[rng.IntN(len(kinds))]
			for range 1 + rng.IntN(3) { // the first request and its retries
				sent.Add(1)
				req, _ := http.NewRequestWithContext(ctx, "POST", g.url("/charges"), strings.NewReader(kind))
				req.Header.Set(idemhttp.Header, key)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
				c, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
			}
		}
	}
	run := func(d time.Duration, seedBase uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() { load(ctx, seedBase+uint64(i)) })
		}
		wg.Wait()
		tr.CloseIdleConnections()
	}
	run(min(d/10, 10*time.Second), 1000) // warm-up: pools, maps, buffers
	before := measure()
	run(d, 2000)
	// Idle connections of the gateway's proxy and client side close on
	// their own; what is left after that is what the load leaked.
	var after usage
	for range 50 {
		after = measure()
		if after.goroutines <= before.goroutines+8 && after.fds <= before.fds+8 {
			break
		}
		time.Sleep(100 * time.Millisecond) // settling, bounded: the checks below decide
	}
	b.mu.Lock()
	worst, keys := 0, len(b.effects)
	for _, n := range b.effects {
		worst = max(worst, n)
	}
	b.mu.Unlock()
	var st []string
	statuses.Range(func(k, v any) bool { st = append(st, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load())); return true })
	t.Logf("soak %v, %d workers: %d requests sent, %d answered %v; %d keys acted on, at most %d effects per key", d, workers, sent.Load(), answered.Load(), st, keys, worst)
	t.Logf("goroutines %d -> %d, fds %d -> %d, heap %d KiB -> %d KiB", before.goroutines, after.goroutines, before.fds, after.fds, before.heap>>10, after.heap>>10)
	if worst > 1 {
		t.Errorf("a key's backend effects: %d, want at most 1", worst)
	}
	if after.goroutines > before.goroutines+8 {
		t.Errorf("goroutines grew from %d to %d", before.goroutines, after.goroutines)
	}
	if before.fds >= 0 && after.fds > before.fds+8 {
		t.Errorf("file descriptors grew from %d to %d", before.fds, after.fds)
	}
}
