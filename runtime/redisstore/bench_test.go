package redisstore_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// The benchmarks time the store's own calls on the test Redis server, for
// profiling (go test -bench . -cpuprofile/-memprofile); the figures that
// decide anything are make bench's ratios against hand-written floors.

func benchKey(b *testing.B, i int) idem.Key {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(time.Now().UnixNano())+uint64(i))
	k, err := idem.NewKey("bench", "redisstore.Bench", string(buf[:]))
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func benchOutcome() idem.Outcome {
	return idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`{"order_id":"o-1","customer":"c-42","amount":4250,"currency":"EUR","status":"placed"}`)}
}

// BenchmarkFirst is a first call's store work: a claim of a free key and its
// complete.
func BenchmarkFirst(b *testing.B) {
	s := redisstore.New(client(b), redisstore.WithPrefix("bench:"))
	ctx, out := b.Context(), benchOutcome()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := idem.ClaimRequest{Key: benchKey(b, i), Token: idem.Token(i + 1), Lease: time.Second, TTL: time.Minute}
		c, err := s.Claim(ctx, req)
		if err != nil || !c.Claimed {
			b.Fatalf("claim: %+v, %v", c, err)
		}
		if err := s.Complete(ctx, req.Key, req.Token, out, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay is a replay's store work: a claim that meets a final
// record.
func BenchmarkReplay(b *testing.B) {
	s := redisstore.New(client(b), redisstore.WithPrefix("bench:"))
	ctx, out := b.Context(), benchOutcome()
	req := idem.ClaimRequest{Key: benchKey(b, 0), Token: 1, Lease: time.Second, TTL: time.Minute}
	if _, err := s.Claim(ctx, req); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, req.Key, req.Token, out, time.Minute); err != nil {
		b.Fatal(err)
	}
	req.Token = 2
	b.ReportAllocs()
	for b.Loop() {
		c, err := s.Claim(ctx, req)
		if err != nil || c.Claimed || len(c.Record.Outcome.Body) != len(out.Body) {
			b.Fatalf("replay: %+v, %v", c, err)
		}
	}
}
