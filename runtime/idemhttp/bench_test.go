package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

const benchBody = `{"customer":"c-42","items":[{"sku":"book-1","qty":2},{"sku":"pen-7","qty":10}],"currency":"EUR"}`

var benchResponse = []byte(`{"order":{"id":"o-1","customer":"c-42","status":"created","total":4250,"currency":"EUR",` +
	`"items":[{"sku":"book-1","qty":2,"price":1500},{"sku":"pen-7","qty":10,"price":125}]}}` + "\n")

// benchHandler is a small JSON endpoint.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/o-1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(benchResponse)
})

// benchServe sends POST /orders to h, in process (no network) or, with
// loopback, through a real server and client over 127.0.0.1.
func benchServe(b *testing.B, h http.Handler, loopback bool, key func(i int) string) {
	b.ReportAllocs()
	do := func(r *http.Request) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	target := "/orders"
	if loopback {
		srv := httptest.NewServer(h)
		defer srv.Close()
		client := srv.Client()
		target = srv.URL + "/orders"
		do = func(r *http.Request) int {
			r.RequestURI = ""
			resp, err := client.Do(r)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
	}
	i := 0
	for b.Loop() {
		r := httptest.NewRequest("POST", target, strings.NewReader(benchBody))
		if key != nil {
			r.Header.Set(idemhttp.Header, key(i))
		}
		if code := do(r); code != http.StatusCreated {
			b.Fatalf("status %d", code)
		}
		i++
	}
}

func benchCases(loopback bool) map[string]func(b *testing.B) {
	return map[string]func(*testing.B){
		"bare": func(b *testing.B) { benchServe(b, benchHandler, loopback, nil) },
		"first": func(b *testing.B) {
			h := idemhttp.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemhttp.SingleTenant())(benchHandler)
			prefix := idemhttp.GenerateKey() + "-"
			benchServe(b, h, loopback, func(i int) string { return prefix + strconv.Itoa(i) })
		},
		"replayed": func(b *testing.B) {
			h := idemhttp.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemhttp.SingleTenant())(benchHandler)
			key := idemhttp.GenerateKey()
			benchServe(b, h, loopback, func(int) string { return key })
		},
	}
}

// BenchmarkMiddleware measures a request through the middleware on
// memstore against the bare handler: a first request (a new key: claim,
// run, store) and a replayed one (a stored key), in process (no network:
// the middleware's own cost) and over loopback (a real server and client).
// Each mode's last sub-benchmark, "ratio", reports in the same run the
// first and replayed requests' time per request as ratios to the bare
// handler's (first/bare, replayed/bare; medians over -count runs).
func BenchmarkMiddleware(b *testing.B) {
	for _, mode := range []string{"inprocess", "loopback"} {
		b.Run(mode, func(b *testing.B) {
			cases := benchCases(mode == "loopback")
			nsPerOp := map[string][]float64{}
			for _, name := range []string{"bare", "first", "replayed"} {
				b.Run(name, func(b *testing.B) {
					cases[name](b)
					if b.N > 1 { // skip the 1-iteration probe
						nsPerOp[name] = append(nsPerOp[name], float64(b.Elapsed().Nanoseconds())/float64(b.N))
					}
				})
			}
			b.Run("ratio", func(b *testing.B) {
				for b.Loop() {
				}
				bare := median(nsPerOp["bare"])
				if bare > 0 {
					b.ReportMetric(median(nsPerOp["first"])/bare, "first/bare")
					b.ReportMetric(median(nsPerOp["replayed"])/bare, "replayed/bare")
				}
				b.ReportMetric(0, "ns/op")
			})
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkOverhead measures the middleware's own cost, in process, on
// memstore: each iteration sends a bare request, a first request (a new
// key) and a replayed one, interleaved so that a loaded machine slows the
// three alike. It reports each one's mean time, the time the middleware
// adds to the bare handler's ("first+ns", "replay+ns"), and the
// allocations it adds (from testing.AllocsPerRun, before the timed loop).
func BenchmarkOverhead(b *testing.B) {
	mw := idemhttp.New(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemhttp.SingleTenant())(benchHandler)
	prefix := idemhttp.GenerateKey() + "-"
	replayKey := idemhttp.GenerateKey()
	n := 0
	send := func(h http.Handler, key string) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(benchBody))
		if key != "" {
			r.Header.Set(idemhttp.Header, key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d", w.Code)
		}
	}
	first := func() { n++; send(mw, prefix+strconv.Itoa(n)) }
	send(mw, replayKey)
	bareAllocs := testing.AllocsPerRun(1000, func() { send(benchHandler, "") })
	firstAllocs := testing.AllocsPerRun(1000, first)
	replayAllocs := testing.AllocsPerRun(1000, func() { send(mw, replayKey) })
	var bare, firsts, replays time.Duration
	for b.Loop() {
		t0 := time.Now()
		send(benchHandler, "")
		t1 := time.Now()
		first()
		t2 := time.Now()
		send(mw, replayKey)
		t3 := time.Now()
		bare, firsts, replays = bare+t1.Sub(t0), firsts+t2.Sub(t1), replays+t3.Sub(t2)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(bare), "bare-ns")
	b.ReportMetric(per(firsts), "first-ns")
	b.ReportMetric(per(replays), "replay-ns")
	b.ReportMetric(per(firsts-bare), "first+ns")
	b.ReportMetric(per(replays-bare), "replay+ns")
	b.ReportMetric(firstAllocs-bareAllocs, "first+allocs")
	b.ReportMetric(replayAllocs-bareAllocs, "replay+allocs")
	b.ReportMetric(0, "ns/op")
}
