package redisstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// The benchmarks run each scenario on redisstore and on a hand-written
// go-redis baseline (SET NX PX to claim, a fenced Lua script to complete,
// GET to replay) in the same run, and report round trips per call (rtt/op),
// counted by a go-redis hook.
//
//	go test -bench . -run '^$' ./runtime/redisstore

// rttHook counts round trips: one per command, one per pipeline.
type rttHook struct{ n atomic.Int64 }

func (h *rttHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *rttHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *rttHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

func benchClient(b *testing.B) (*redis.Client, *rttHook) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), PoolSize: 32})
	b.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(b.Context()).Err(); err != nil {
		b.Fatal(err)
	}
	h := &rttHook{}
	c.AddHook(h)
	return c, h
}

// baseline is the hand-written go-redis idempotency a team would write
// without idemgen: one string key per record.
type baseline struct {
	c      *redis.Client
	prefix string
}

// completeLua is the fenced complete: it replaces the claim "P"+token with
// the outcome only while the claim holds the token.
var completeLua = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
return 0`)

func (bl *baseline) key(k idem.Key) string { return bl.prefix + "{" + k.Hex() + "}" }

func claimValue(tok idem.Token) string {
	return "P" + string(binary.BigEndian.AppendUint64(nil, uint64(tok)))
}

func (bl *baseline) claim(ctx context.Context, k idem.Key, tok idem.Token, lease time.Duration) (bool, error) {
	return bl.c.SetNX(ctx, bl.key(k), claimValue(tok), lease).Result()
}

func (bl *baseline) complete(ctx context.Context, k idem.Key, tok idem.Token, body []byte, ttl time.Duration) error {
	n, err := completeLua.Run(ctx, bl.c, []string{bl.key(k)}, claimValue(tok), append([]byte("D"), body...), ttl.Milliseconds()).Int()
	if err == nil && n != 1 {
		err = idem.ErrLeaseLost
	}
	return err
}

func (bl *baseline) replay(ctx context.Context, k idem.Key) ([]byte, error) {
	return bl.c.Get(ctx, bl.key(k)).Bytes()
}

// compare runs b.N calls of store and b.N calls of base, interleaved in
// chunks so that both see the same machine load, each chunk on callers
// goroutines. It reports ns/op and the counters per call of store, the same
// for base with a "base-" prefix, and the ratio store/base as x-base. i is
// the call's index, unique per variant.
func compare(b *testing.B, callers int, counters map[string]func() int64, store, base func(i int) error) {
	type variant struct {
		f       func(int) error
		next    int
		elapsed time.Duration
		counts  map[string]int64
	}
	vs := []*variant{{f: store, counts: map[string]int64{}}, {f: base, counts: map[string]int64{}}}
	chunk := 32 * callers
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		for _, v := range vs {
			before := map[string]int64{}
			for name, c := range counters {
				before[name] = c()
			}
			from := v.next
			v.next += n
			var next atomic.Int64
			next.Store(int64(from))
			var wg sync.WaitGroup
			var once sync.Once
			start := time.Now()
			for range min(callers, n) {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(from+n) {
							return
						}
						if err := v.f(int(i)); err != nil {
							once.Do(func() { b.Error(err) })
							return
						}
					}
				})
			}
			wg.Wait()
			v.elapsed += time.Since(start)
			for name, c := range counters {
				v.counts[name] += c() - before[name]
			}
		}
	}
	b.StopTimer()
	st, bs := vs[0], vs[1]
	b.ReportMetric(float64(st.elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(bs.elapsed.Nanoseconds())/float64(b.N), "base-ns/op")
	b.ReportMetric(float64(st.elapsed)/float64(bs.elapsed), "x-base")
	for name := range counters {
		b.ReportMetric(float64(st.counts[name])/float64(b.N), name+"/op")
		b.ReportMetric(float64(bs.counts[name])/float64(b.N), "base-"+name+"/op")
	}
}

var body = make([]byte, 256)

func keys(run string, n int) []idem.Key {
	ks := make([]idem.Key, n)
	for i := range ks {
		ks[i], _ = idem.NewKey("bench", run, strconv.Itoa(i))
	}
	return ks
}

func runID() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// BenchmarkClaimComplete: a first call, claim then complete, on a fresh key.
func BenchmarkClaimComplete(b *testing.B) {
	c, h := benchClient(b)
	s := redisstore.New(c, redisstore.WithPrefix("bench:"))
	bl := &baseline{c: c, prefix: "bench-base:"}
	ctx := b.Context()
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: body}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			run := runID()
			compare(b, callers, map[string]func() int64{"rtt": h.n.Load},
				func(i int) error {
					k, _ := idem.NewKey("bench", run, strconv.Itoa(i))
					tok := idem.Token(i + 1)
					cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: tok, Lease: 10 * time.Second, TTL: time.Minute})
					if err != nil || !cl.Claimed {
						return fmt.Errorf("claim: claimed=%v: %w", cl.Claimed, err)
					}
					return s.Complete(ctx, k, tok, out, time.Minute)
				},
				func(i int) error {
					k, _ := idem.NewKey("bench", run, strconv.Itoa(i))
					tok := idem.Token(i + 1)
					ok, err := bl.claim(ctx, k, tok, 10*time.Second)
					if err != nil || !ok {
						return fmt.Errorf("claim: ok=%v: %w", ok, err)
					}
					return bl.complete(ctx, k, tok, body, time.Minute)
				})
		})
	}
}

// BenchmarkReplay: a retry of a completed call, answered with its outcome.
func BenchmarkReplay(b *testing.B) {
	c, h := benchClient(b)
	s := redisstore.New(c, redisstore.WithPrefix("bench:"))
	bl := &baseline{c: c, prefix: "bench-base:"}
	ctx := b.Context()
	ks := keys(runID(), 1024)
	for i, k := range ks {
		tok := idem.Token(i + 1)
		if _, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: tok, Lease: time.Minute, TTL: 10 * time.Minute}); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, k, tok, idem.Outcome{Status: idem.StatusSucceeded, Body: body}, 10*time.Minute); err != nil {
			b.Fatal(err)
		}
		if _, err := bl.claim(ctx, k, tok, time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := bl.complete(ctx, k, tok, body, 10*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			compare(b, callers, map[string]func() int64{"rtt": h.n.Load},
				func(i int) error {
					cl, err := s.Claim(ctx, idem.ClaimRequest{Key: ks[i%len(ks)], Token: 1 << 40, Lease: time.Second, TTL: time.Minute})
					if err == nil && (cl.Claimed || len(cl.Record.Outcome.Body) != len(body)) {
						err = fmt.Errorf("not a replay: %+v", cl)
					}
					return err
				},
				func(i int) error {
					v, err := bl.replay(ctx, ks[i%len(ks)])
					if err == nil && len(v) != len(body)+1 {
						err = fmt.Errorf("not a replay: %q", v)
					}
					return err
				})
		})
	}
}
