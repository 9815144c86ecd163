package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// BenchmarkRedisReplay measures a replay on redisstore, in process (no
// HTTP network), against its floor: one GET of a stored body and that body
// written back, with no check. Interleaved per iteration; it reports each
// one's mean time and replay/floor. The middleware's checks (key parsing,
// fingerprint, scope), its store's claim and its decoding are the
// difference.
func BenchmarkRedisReplay(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	b.Cleanup(func() { _ = c.Close() })
	ctx := b.Context()
	mw := idemhttp.New(idem.NewExecutor(redisstore.New(c, redisstore.WithPrefix("idemhttp-bench:")), idem.SingleTenant()), idemhttp.SingleTenant())(benchHandler)
	key := idemhttp.GenerateKey()
	floorKey := "idemhttp-bench-floor:" + key
	if err := c.Set(ctx, floorKey, benchResponse, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	floor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := c.Get(r.Context(), floorKey).Bytes()
		if err != nil {
			b.Fatal(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/o-1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(v)
	})
	send := func(h http.Handler) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(benchBody))
		r.Header.Set(idemhttp.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d", w.Code)
		}
	}
	send(mw) // the first request: stored
	b.ReportAllocs()
	var floors, replays time.Duration
	for i := 0; b.Loop(); i++ {
		a, z := http.Handler(floor), http.Handler(mw)
		if i%2 == 1 {
			a, z = z, a
		}
		t0 := time.Now()
		send(a)
		t1 := time.Now()
		send(z)
		t2 := time.Now()
		if i%2 == 1 {
			replays, floors = replays+t1.Sub(t0), floors+t2.Sub(t1)
		} else {
			floors, replays = floors+t1.Sub(t0), replays+t2.Sub(t1)
		}
	}
	b.ReportMetric(float64(floors.Nanoseconds())/float64(b.N), "floor-ns")
	b.ReportMetric(float64(replays.Nanoseconds())/float64(b.N), "replay-ns")
	b.ReportMetric(float64(replays)/float64(floors), "replay/floor")
	b.ReportMetric(0, "ns/op")
}
