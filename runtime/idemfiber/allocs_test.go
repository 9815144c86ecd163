// The race detector makes sync.Pool drop values at random, so allocation
// counts under it are not the program's: make test runs this file without
// -race.

//go:build !race

package idemfiber_test

import (
	"math"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// leastAllocs is testing.AllocsPerRun(100, f) at its lowest of 3 rounds:
// a garbage collection during a round empties the sync.Pools that
// fasthttp, Fiber and go-redis keep, whose refill is not the request's.
func leastAllocs(f func()) float64 {
	least := math.Inf(1)
	for range 3 {
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}

// TestAllocsReplay pins the allocations of a replay through idemfiber, the
// whole Fiber request included, on memstore and on redisstore (issue 38:
// 44 and 54 before; Fiber's own middleware makes 18 on Redis, with no
// payload check, no claim and no tenant or operation scope). A change
// that adds some must say why, here.
func TestAllocsReplay(t *testing.T) {
	cases := []struct {
		name  string
		h     func(t *testing.T) fasthttp.RequestHandler
		limit float64
	}{
		{"memstore", func(*testing.T) fasthttp.RequestHandler { return memstoreOrderApp() }, 19},
		{"redisstore", func(t *testing.T) fasthttp.RequestHandler {
			c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
			t.Cleanup(func() { _ = c.Close() })
			return orderApp(redisstore.New(c, redisstore.WithPrefix("idemfiber-allocs:")))
		}, 29},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h(t)
			var ctx fasthttp.RequestCtx
			key := uuid.NewString()
			if st, _ := post(&ctx, h, key); st != 201 {
				t.Fatalf("first request: %d", st)
			}
			got := leastAllocs(func() {
				if st, replayed := post(&ctx, h, key); st != 201 || !replayed {
					t.Fatalf("replay: %d, replayed %v", st, replayed)
				}
			})
			t.Logf("%s: %.0f allocations per replay", tc.name, got)
			if got > tc.limit {
				t.Errorf("%s: %.0f allocations per replay, pinned at %.0f", tc.name, got, tc.limit)
			}
		})
	}
}

// TestAllocsFirst pins the allocations of a first request through
// idemfiber on memstore, the handler's run and the Fiber request included
// (the keys are made before): 59 before issue 38.
func TestAllocsFirst(t *testing.T) {
	h := memstoreOrderApp()
	var ctx fasthttp.RequestCtx
	keys := make([]string, 0, 400)
	for range cap(keys) {
		keys = append(keys, uuid.NewString())
	}
	got := leastAllocs(func() {
		key := keys[0]
		keys = keys[1:]
		if st, replayed := post(&ctx, h, key); st != 201 || replayed {
			t.Fatalf("first request: %d, replayed %v", st, replayed)
		}
	})
	t.Logf("%.0f allocations per first request", got)
	if got > firstLimit {
		t.Errorf("%.0f allocations per first request, pinned at %d", got, firstLimit)
	}
}

// firstLimit is TestAllocsFirst's pin.
const firstLimit = 38
