package redisstore_test

import (
	"context"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// demotedFor is a real redisstore.Store on a private redis-server that is
// demoted to a replica (REPLICAOF a master that is not there: what a
// client of a failed-over master meets until it follows the new one) from
// start until the executor's clock has advanced by span, and promoted back.
type demotedFor struct {
	*redisstore.Store
	c     *redis.Client
	clock *idemtest.FakeClock
	dead  string // the port of the absent master

	mu       sync.Mutex
	until    time.Time
	promoted bool
	answers  []error
}

func (s *demotedFor) start(ctx context.Context, span time.Duration) error {
	s.mu.Lock()
	s.until = s.clock.Now().Add(span)
	s.mu.Unlock()
	return s.c.Do(ctx, "REPLICAOF", "127.0.0.1", s.dead).Err()
}

func (s *demotedFor) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	if !s.until.IsZero() && !s.clock.Now().Before(s.until) && !s.promoted {
		s.promoted = true
		if err := s.c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()
	err := s.Store.Complete(ctx, key, token, out, ttl)
	s.mu.Lock()
	s.answers = append(s.answers, err)
	s.mu.Unlock()
	return err
}

// TestCompleteThroughDemotedMaster: the Redis server a call claimed on is
// demoted to a replica for 3 s, by the executor's clock, while the call
// stores its outcome under a 5 s lease: Redis answers READONLY. The store marks the answers as
// an outage, the executor keeps trying, the outcome is stored once the
// server is a master again, and a retry replays it: the method ran once.
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

			clk := idemtest.NewFakeClock(time.Unix(1_700_000_000, 0), true) // Sleep advances it at once
			st := &demotedFor{Store: redisstore.New(c), c: c, clock: clk, dead: strconv.Itoa(dead)}
			var mu sync.Mutex
			var events []idem.EventKind
			ex := idem.NewExecutor(st, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(5*time.Second),
				idem.WithObserver(func(e idem.Event) { mu.Lock(); events = append(events, e.Kind); mu.Unlock() }))
			m := &idem.Method{Op: "Orders.Pay", TTL: time.Hour}
			runs := 0
			fn := func(ctx context.Context) (string, error) {
				runs++
				if runs == 1 {
					if err := st.start(ctx, 3*time.Second); err != nil {
						return "", err
					}
				}
				return "receipt-" + strconv.Itoa(runs), nil
			}
			v, err := pay(ctx, ex, m, "order-1", 100, fn)
			require.NoError(t, err)
			assert.Equal(t, "receipt-1", v)

			st.mu.Lock()
			answers := st.answers
			st.mu.Unlock()
			require.Greater(t, len(answers), 1, "the first Complete met the demoted server")
			assert.Contains(t, answers[0].Error(), tc.reply, "the server's own answer")
			assert.ErrorIs(t, answers[0], idem.ErrStoreOutage, "redisstore marks it as an outage")
			assert.NoError(t, answers[len(answers)-1], "stored once the server is a master again")
			mu.Lock()
			assert.Contains(t, events, idem.EventCompleted)
			assert.NotContains(t, events, idem.EventOutcomeNotStored, "an outage gets no substitute")
			mu.Unlock()

			v, err = pay(ctx, ex, m, "order-1", 100, fn)
			require.NoError(t, err)
			assert.Equal(t, "receipt-1", v, "the retry replays the stored outcome")
			assert.Equal(t, 1, runs, "the method ran exactly once")
		})
	}
}
