package redisstore_test

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestCompleteThroughDemotedMaster: the private redis-server a call claimed
// on is demoted to a replica (REPLICAOF a master that is not there: what a
// client of a failed-over master meets until it follows the new one) for
// 3 s, by the executor's clock, while the call stores its outcome under a
// 5 s lease, and promoted back: Redis answers READONLY. The rest is
// idemtest.CompleteThroughOutage's: the method runs exactly once.
func TestCompleteThroughDemotedMaster(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (scripts/redis.sh installs it)")
	}
	for _, tc := range []struct {
		stale string
		reply string
	}{{"yes", "READONLY"}, {"no", "READONLY"}} { // MASTERDOWN answers reads only: the complete script writes
		t.Run("replica-serve-stale-data="+tc.stale, func(t *testing.T) {
			p, err := freeport.Pick(0)
			require.NoError(t, err)
			t.Cleanup(func() { freeport.Release(p) })
			dead, err := freeport.Pick(0) // reserved and never listened on: the absent master
			require.NoError(t, err)
			t.Cleanup(func() { freeport.Release(dead) })
			port := strconv.Itoa(p)
			cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--dir", t.TempDir(), "--replica-serve-stale-data", tc.stale)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			ctx := t.Context()
			require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond)

			idemtest.CompleteThroughOutage(t, idemtest.StoreOutage{
				Store: redisstore.New(c),
				Begin: func(ctx context.Context) error { return c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(dead)).Err() },
				End:   func(ctx context.Context) error { return c.Do(ctx, "REPLICAOF", "NO", "ONE").Err() },
				Span:  3 * time.Second,
				Lease: 5 * time.Second,
				CheckFirst: func(t testing.TB, err error) {
					assert.Contains(t, err.Error(), tc.reply, "the server's own answer")
				},
			})
		})
	}
}
