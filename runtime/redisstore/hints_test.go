package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestRefusalHintsBounded: the store remembers, in this process, the
// tenants refused their share in the last second (tenant names come from
// requests). Waves of ever-new tenants, each refused once and never seen
// again, leave at most about twice a wave's hints: the hints of tenants
// whose second has passed are dropped, not kept for the process's life.
func TestRefusalHintsBounded(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	prefix := "hints" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	s := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTenantShare(1, time.Hour))
	var mu sync.Mutex
	now := time.Now()
	redisstore.SetHintClock(s, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	t.Cleanup(func() {
		keys, _ := c.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
	})
	const waves, wave = 5, 100
	for w := range waves {
		for i := range wave {
			tenant := "t" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
			for j := range 2 {
				k, err := idem.NewKey(tenant, "op", strconv.Itoa(j))
				require.NoError(t, err)
				_, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: idem.Token(j + 1), Lease: time.Minute, TTL: time.Minute})
				if j == 1 {
					require.ErrorIs(t, err, idem.ErrStoreFull, "the second record passes the share of 1")
				} else {
					require.NoError(t, err)
				}
			}
		}
		require.LessOrEqual(t, redisstore.HintLen(s), 2*wave, "after wave %d: the hints of tenants refused long ago are kept", w)
		mu.Lock()
		now = now.Add(2 * time.Second)
		mu.Unlock()
	}
}
