package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// clusterClient returns a client of the test Redis Cluster
// ($IDEM_REDIS_CLUSTER_ADDRS: 3 masters, 1 replica each), closed when t
// ends.
func clusterClient(t testing.TB, o redis.ClusterOptions) *redis.ClusterClient {
	t.Helper()
	o.Addrs = testenv.RedisClusterAddrs(t)
	if o.PoolSize == 0 {
		o.PoolSize = 128
	}
	c := redis.NewClusterClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.ForEachShard(t.Context(), func(ctx context.Context, s *redis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("redis cluster at %v: %v", o.Addrs, err)
	}
	return c
}

// TestClusterConformance runs the store contract on a real Redis Cluster
// through a *redis.ClusterClient: every script touches one hash-tagged key,
// so each runs on the master of its slot.
func TestClusterConformance(t *testing.T) {
	c := clusterClient(t, redis.ClusterOptions{ReadTimeout: 30 * time.Second})
	idemtest.Run(t, idemtest.Options{
		NewStore: func(*testing.T) idem.Store { return redisstore.New(c, redisstore.WithPrefix(casePrefix())) },
		// Six servers and the client share two cores: the default lease
		// of 150ms lapsed between two claims of one case once in three
		// runs under -race (ClaimTwiceSameToken took 280ms).
		Unit: 500 * time.Millisecond,
		Down: func(t *testing.T) idem.Store {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			_ = l.Close()
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = c.Close() })
			return redisstore.New(c)
		},
	})
}

// TestClusterSpread claims 300 keys and checks that each record lives on
// the master of its slot (asked directly, without redirection) and that
// every master holds a fair share: the records spread over the cluster,
// none is pinned to one slot.
func TestClusterSpread(t *testing.T) {
	c := clusterClient(t, redis.ClusterOptions{})
	s := redisstore.New(c, redisstore.WithPrefix("spread:"))
	ctx := t.Context()
	tenant := "spread-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ranges := masterRanges(t, c)
	direct := map[string]*redis.Client{}
	perMaster := map[string]int{}
	for i := range 300 {
		k, err := idem.NewKey(tenant, "op", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		tok := idem.Token(i + 1)
		cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: tok, Lease: time.Minute, TTL: time.Minute})
		if err != nil || !cl.Claimed {
			t.Fatalf("claim %d: %+v, %v", i, cl, err)
		}
		rk := s.RedisKey(k)
		addr := ranges.master(keySlot(rk))
		m := direct[addr]
		if m == nil {
			m = redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = m.Close() })
			direct[addr] = m
		}
		if n, err := m.Exists(ctx, rk).Result(); err != nil || n != 1 {
			t.Fatalf("record %s (slot %d) not on master %s: exists=%d, %v", rk, keySlot(rk), addr, n, err)
		}
		perMaster[addr]++
		if err := s.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	if len(perMaster) != 3 {
		t.Fatalf("records on %d masters, want 3: %v", len(perMaster), perMaster)
	}
	for a, n := range perMaster {
		if n < 50 { // 100 expected per master; fewer than 50 is not chance
			t.Errorf("master %s holds %d of 300 records: %v", a, n, perMaster)
		}
	}
}

// slotRange is a range of slots and the address of its master.
type slotRange struct {
	start, end int
	master     string
}

// slotRanges are the cluster's slot ranges.
type slotRanges []slotRange

// master returns the address of the master of slot.
func (r slotRanges) master(slot int) string {
	for _, s := range r {
		if slot >= s.start && slot <= s.end {
			return s.master
		}
	}
	return ""
}

// masterRanges returns the slot ranges of the cluster's masters (CLUSTER
// SHARDS) and fails t unless there are 3 masters.
func masterRanges(t testing.TB, c *redis.ClusterClient) slotRanges {
	t.Helper()
	shards, err := c.ClusterShards(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var r slotRanges
	masters := map[string]bool{}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" || len(sh.Slots) == 0 {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			masters[addr] = true
			for _, sr := range sh.Slots {
				r = append(r, slotRange{int(sr.Start), int(sr.End), addr})
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("the cluster has %d masters, want 3: %+v", len(masters), shards)
	}
	return r
}

// keySlot is the cluster slot of key: CRC16 (XMODEM) of its hash tag (the
// text between the first '{' and the next '}', when not empty; else the
// whole key) mod 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TestKeySlot checks keySlot against the server's CLUSTER KEYSLOT.
func TestKeySlot(t *testing.T) {
	c := clusterClient(t, redis.ClusterOptions{})
	for _, key := range []string{"foo", "{user1000}.following", "bar{}x", "{}", "a{b", "spread:{00ff}", "x{y}{z}"} {
		want, err := c.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); got != int(want) {
			t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// BenchmarkClusterFirstCall measures first calls (a Claim and a Complete
// of a 200-byte outcome on a fresh key) through one *redis.ClusterClient,
// with 16 and 64 concurrent callers, on keys whose slots all belong to one
// master (masters=1) or spread over the three (masters=3). The ratio of
// the two calls/s in one run shows whether anything serialises across
// slots; on a 2-core machine that runs the client and all six servers the
// aim is a ratio above 1, not 3.
//
//	scripts/with-services.sh go test ./runtime/redisstore -run '^$' -bench ClusterFirstCall -benchtime 20000x
func BenchmarkClusterFirstCall(b *testing.B) {
	c := clusterClient(b, redis.ClusterOptions{PoolSize: 256})
	ranges := masterRanges(b, c)
	one := ranges[0].master
	s := redisstore.New(c, redisstore.WithPrefix("bench:"))
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, 200)}
	run := 0
	for _, callers := range []int{16, 64} {
		for _, masters := range []int{1, 3} {
			b.Run(fmt.Sprintf("callers=%d/masters=%d", callers, masters), func(b *testing.B) {
				run++
				tenant := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), run)
				keys := make([]idem.Key, 0, b.N)
				for i := 0; len(keys) < b.N; i++ {
					k, err := idem.NewKey(tenant, "op", strconv.Itoa(i))
					if err != nil {
						b.Fatal(err)
					}
					if masters == 1 && ranges.master(keySlot(s.RedisKey(k))) != one {
						continue
					}
					keys = append(keys, k)
				}
				var (
					next   atomic.Int64
					failed atomic.Value
					wg     sync.WaitGroup
				)
				b.ResetTimer()
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := int(next.Add(1)) - 1
							if i >= len(keys) {
								return
							}
							tok := idem.Token(i + 1)
							cl, err := s.Claim(b.Context(), idem.ClaimRequest{Key: keys[i], Token: tok, Lease: time.Minute, TTL: time.Minute})
							if err == nil && !cl.Claimed {
								err = fmt.Errorf("key %d not claimed: %+v", i, cl)
							}
							if err == nil {
								err = s.Complete(b.Context(), keys[i], tok, out, time.Minute)
							}
							if err != nil {
								failed.CompareAndSwap(nil, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			})
		}
	}
}
