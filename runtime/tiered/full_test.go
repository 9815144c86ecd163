package tiered_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// TestFastStoreFull: a fast Redis at its maxmemory under noeviction refuses
// new records. That is an answer, not a failure: new claims go on with the
// durable store, the fast store is not skipped for a cool-down (no
// degradation), and replays of the records it holds are still answered by
// it alone.
func TestFastStoreFull(t *testing.T) {
	srv := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	c := fastClient(t, srv.Addr)
	ctx := t.Context()
	durable := &countingStore{Store: memstore.New()}
	var ev events
	s := tiered.New(redisstore.New(c), durable, tiered.WithObserver(ev.observe))
	key := func(id string) idem.Key {
		k, err := idem.NewKey("full", "Op", id)
		require.NoError(t, err)
		return k
	}
	done := idem.ClaimRequest{Key: key("done"), Token: 1, Lease: time.Minute, TTL: time.Hour}
	cl, err := s.Claim(ctx, done)
	require.NoError(t, err)
	require.True(t, cl.Claimed)
	require.NoError(t, s.Complete(ctx, done.Key, done.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("r")}, time.Hour))
	testenv.FillRedis(t, c)

	for i := range 20 {
		r := idem.ClaimRequest{Key: key("new" + strconv.Itoa(i)), Token: idem.Token(10 + i), Lease: time.Minute, TTL: time.Hour}
		cl, err := s.Claim(ctx, r)
		require.NoError(t, err, "the durable store decides while the fast one is full")
		require.True(t, cl.Claimed)
		require.NoError(t, s.Complete(ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded}, time.Hour))
	}
	assert.Equal(t, 20, ev.count(tiered.EventFastFull), "each refusal of the fast store is told")
	assert.Zero(t, ev.count(tiered.EventDegraded), "a full fast store is not skipped")
	assert.Zero(t, ev.count(tiered.EventFastError))

	before := durable.claims.Load()
	again := done
	again.Token = 2
	cl, err = s.Claim(ctx, again)
	require.NoError(t, err)
	assert.Equal(t, []byte("r"), cl.Record.Outcome.Body)
	assert.Equal(t, before, durable.claims.Load(), "the replay was answered by the full fast store alone")
}
