package redisstore_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestTakeoverRace: 32 callers with the same fingerprint (and one with
// another) race to take over a lapsed lease, on many keys. Exactly one of
// them takes the key over; every other sees the winner's record; the old
// token is fenced and the one of another payload never claims.
func TestTakeoverRace(t *testing.T) {
	const callers, keys = 32, 20
	s := redisstore.New(client(t), redisstore.WithPrefix("idemtest-race:"))
	ctx := t.Context()
	tenant := "race-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fp := idem.Fingerprint{7}
	for k := range keys {
		key, err := idem.NewKey(tenant, "Op", strconv.Itoa(k))
		require.NoError(t, err)
		zombie := idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 1, Lease: time.Millisecond, TTL: time.Minute}
		c, err := s.Claim(ctx, zombie)
		require.NoError(t, err)
		require.True(t, c.Claimed)
		time.Sleep(5 * time.Millisecond) // the 1ms lease lapses

		claims := make([]idem.Claim, callers+1)
		errs := make([]error, callers+1)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range claims {
			wg.Go(func() {
				r := idem.ClaimRequest{Key: key, Fingerprint: fp, Token: idem.Token(100 + i), Lease: time.Minute, TTL: time.Minute}
				if i == callers {
					r.Fingerprint = idem.Fingerprint{8} // another payload
				}
				start.Wait()
				claims[i], errs[i] = s.Claim(ctx, r)
			})
		}
		start.Done()
		wg.Wait()
		winner := -1
		for i, c := range claims {
			require.NoError(t, errs[i])
			if c.Claimed {
				require.Equal(t, -1, winner, "key %d: callers %d and %d both claimed", k, winner, i)
				assert.True(t, c.TakenOver)
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "key %d: nobody took the lapsed lease over", k)
		require.NotEqual(t, callers, winner, "key %d: another payload took the lease over", k)
		for i, c := range claims {
			switch {
			case i == callers: // refused before or after the takeover
				assert.Contains(t, []idem.Token{zombie.Token, idem.Token(100 + winner)}, c.Record.Token, "key %d", k)
				assert.Equal(t, fp, c.Record.Fingerprint, "key %d: the record keeps its payload", k)
			case i != winner:
				assert.Equal(t, idem.Token(100+winner), c.Record.Token, "key %d: caller %d sees the winner's record", k, i)
				assert.Equal(t, idem.StatusProcessing, c.Record.Status)
				assert.Positive(t, c.Record.LeaseLeft, "key %d: the winner's lease is live", k)
			}
		}
		assert.ErrorIs(t, s.Complete(ctx, key, zombie.Token, idem.Outcome{Status: idem.StatusSucceeded}, time.Minute), idem.ErrLeaseLost,
			"key %d: the old token is fenced", k)
		require.NoError(t, s.Complete(ctx, key, idem.Token(100+winner), idem.Outcome{Status: idem.StatusSucceeded}, time.Minute))
	}
}
