package memstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// maxInspectedPerClaim bounds the records one claim looks at to find
// expired ones, whatever the store's size: the reclaim budget plus the head
// of each expiry queue of every shard it visits.
const maxInspectedPerClaim = 64 + 2*64

func key(t testing.TB, tenant, part string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, "op", part)
	require.NoError(t, err)
	return k
}

// fill claims n keys of tenant with ttl, completing every other one.
func fill(t testing.TB, s *memstore.Store, tenant, prefix string, n int, ttl time.Duration) {
	t.Helper()
	for i := range n {
		k := key(t, tenant, prefix+strconv.Itoa(i))
		c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: ttl, TTL: ttl})
		require.NoError(t, err)
		require.True(t, c.Claimed)
		if i%2 == 0 {
			require.NoError(t, s.Complete(t.Context(), k, 1, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}, ttl))
		}
	}
}

// TestRefusalCost: a claim refused by a full store looks at a bounded
// number of records whatever the store holds (it used to sweep every
// record of every shard), and a store full of expired records admits a new
// claim by removing a bounded number of them, without a Sweep.
func TestRefusalCost(t *testing.T) {
	for _, n := range []int{10_000, 100_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
			s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxRecords(n), memstore.WithTenantShare(0))
			// Two TTLs, so that the shards hold two expiry queues.
			fill(t, s, "t", "a", n/2, time.Hour)
			fill(t, s, "t", "b", n-n/2, 2*time.Hour)
			require.Equal(t, n, s.Len())

			const refusals = 100
			before := memstore.Inspected(s)
			for i := range refusals {
				_, err := s.Claim(t.Context(), idem.ClaimRequest{Key: key(t, "t", "new"+strconv.Itoa(i)), Token: 2, Lease: time.Minute, TTL: time.Hour})
				require.ErrorIs(t, err, idem.ErrStoreFull)
			}
			per := float64(memstore.Inspected(s)-before) / refusals
			t.Logf("%d live records: %.1f records inspected per refused claim", n, per)
			assert.LessOrEqual(t, per, float64(maxInspectedPerClaim), "a refusal inspects a bounded number of records")

			// Every record expires: each new claim makes its own room.
			clock.Advance(3 * time.Hour)
			for i := range refusals {
				before := memstore.Inspected(s)
				c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: key(t, "t", "fresh"+strconv.Itoa(i)), Token: 3, Lease: time.Minute, TTL: time.Hour})
				require.NoError(t, err, "expired records make room")
				require.True(t, c.Claimed)
				assert.LessOrEqual(t, memstore.Inspected(s)-before, int64(maxInspectedPerClaim), "claim %d", i)
			}
			assert.Less(t, s.Len(), n, "the claims removed expired records as they went")
		})
	}
}

// TestTenantShare: a tenant that holds its share is refused alone, with a
// *idem.TenantQuotaError that is still an ErrStoreFull; its replays,
// outcomes and releases go on, other tenants and the single key space
// claim, and released and expired records give the share back.
func TestTenantShare(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	const share = 10
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithTenantShare(share))
	require.Equal(t, share, s.TenantShare())
	ctx := t.Context()
	req := func(tenant string, i int) idem.ClaimRequest {
		return idem.ClaimRequest{Key: key(t, tenant, strconv.Itoa(i)), Token: idem.Token(i + 1), Lease: time.Minute, TTL: time.Hour}
	}
	for i := range share {
		c, err := s.Claim(ctx, req("a", i))
		require.NoError(t, err)
		require.True(t, c.Claimed)
	}
	assert.Equal(t, share, s.TenantLen("a"))
	_, err := s.Claim(ctx, req("a", share))
	require.ErrorIs(t, err, idem.ErrStoreFull)
	var q *idem.TenantQuotaError
	require.ErrorAs(t, err, &q)
	assert.Equal(t, "a", q.Tenant)
	assert.Equal(t, int64(share), q.Share)
	assert.Contains(t, err.Error(), "the tenant's share of 10 records")

	for i := range share {
		c, err := s.Claim(ctx, req("b", i))
		require.NoError(t, err, "another tenant is not refused")
		require.True(t, c.Claimed)
	}
	for i := range 3 * share {
		_, err := s.Claim(ctx, req("", i))
		require.NoError(t, err, "the single key space has no share")
	}

	// The refused tenant's held keys go on.
	c, err := s.Claim(ctx, req("a", 0))
	require.NoError(t, err)
	require.True(t, c.Claimed, "a claim repeated by its token")
	require.NoError(t, s.Complete(ctx, req("a", 0).Key, 1, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("done")}, time.Hour))
	r := req("a", 0)
	r.Token = 99
	c, err = s.Claim(ctx, r)
	require.NoError(t, err)
	require.False(t, c.Claimed)
	assert.Equal(t, []byte("done"), c.Record.Outcome.Body, "a replay")
	require.NoError(t, s.Release(ctx, req("a", 1).Key, 2))
	_, err = s.Claim(ctx, req("a", share))
	require.NoError(t, err, "a released record gives its place back")
	_, err = s.Claim(ctx, req("a", share+1))
	require.ErrorAs(t, err, &q)

	clock.Advance(2 * time.Hour)
	_, err = s.Claim(ctx, req("a", share+1))
	require.NoError(t, err, "expired records give the share back")
	assert.Equal(t, 1, s.TenantLen("a"), "the refusal's reclaim removed the expired ones")
}

// TestTenantShareDefault: without WithTenantShare a tenant may hold a
// quarter of the record bound; WithTenantShare(0) turns the share off.
func TestTenantShareDefault(t *testing.T) {
	assert.Equal(t, memstore.DefaultMaxRecords/memstore.DefaultTenantShareDivisor, memstore.New().TenantShare())
	assert.Equal(t, 25, memstore.New(memstore.WithMaxRecords(100)).TenantShare())
	assert.Equal(t, 1, memstore.New(memstore.WithMaxRecords(2)).TenantShare())
	assert.Equal(t, 0, memstore.New(memstore.WithTenantShare(0)).TenantShare())
	assert.PanicsWithValue(t, "memstore: WithTenantShare(-1): the share must not be negative", func() { memstore.New(memstore.WithTenantShare(-1)) })
}

// TestFloodOnFullStore: tenants flood a store with fresh keys until it is
// full. Each flooder is refused at its share, the others' replays,
// outcomes and releases go on throughout, a tenant that is not flooding
// claims until the store itself is full, and then gets the store's own
// ErrStoreFull (not a tenant quota); every refusal costs a bounded number
// of inspected records.
func TestFloodOnFullStore(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	const bound = 4000
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxRecords(bound))
	ctx := t.Context()
	fill(t, s, "victim", "done", 100, time.Hour) // half completed
	held := idem.ClaimRequest{Key: key(t, "victim", "held"), Token: 7, Lease: time.Minute, TTL: time.Hour}
	_, err := s.Claim(ctx, held)
	require.NoError(t, err)
	held2 := idem.ClaimRequest{Key: key(t, "victim", "held2"), Token: 8, Lease: time.Minute, TTL: time.Hour}
	_, err = s.Claim(ctx, held2)
	require.NoError(t, err)

	replays := func() {
		t.Helper()
		for i := 0; i < 100; i += 2 {
			c, err := s.Claim(ctx, idem.ClaimRequest{Key: key(t, "victim", "done"+strconv.Itoa(i)), Token: 9, Lease: time.Minute, TTL: time.Hour})
			require.NoError(t, err, "a replay on a flooded store")
			require.False(t, c.Claimed)
			require.Equal(t, []byte("ok"), c.Record.Outcome.Body)
		}
	}
	for f := range 4 {
		flooder := fmt.Sprintf("flood-%d", f)
		refused := 0
		for i := range 2 * bound / 4 {
			before := memstore.Inspected(s)
			_, err := s.Claim(ctx, idem.ClaimRequest{Key: key(t, flooder, strconv.Itoa(i)), Token: 1, Lease: time.Minute, TTL: time.Hour})
			if err != nil {
				require.ErrorIs(t, err, idem.ErrStoreFull)
				refused++
				require.LessOrEqual(t, memstore.Inspected(s)-before, int64(maxInspectedPerClaim))
			}
		}
		require.Positive(t, refused, "%s is refused at its share or the bound", flooder)
		replays()
		if f < 3 {
			c, err := s.Claim(ctx, idem.ClaimRequest{Key: key(t, "other", strconv.Itoa(f)), Token: 1, Lease: time.Minute, TTL: time.Hour})
			require.NoError(t, err, "another tenant claims while %s floods", flooder)
			require.True(t, c.Claimed)
		}
	}
	require.Equal(t, bound, s.Len(), "four flooders fill the store")
	_, err = s.Claim(ctx, idem.ClaimRequest{Key: key(t, "other", "late"), Token: 1, Lease: time.Minute, TTL: time.Hour})
	require.ErrorIs(t, err, idem.ErrStoreFull, "a full store refuses everyone")
	var q *idem.TenantQuotaError
	assert.False(t, errors.As(err, &q), "the store's bound, not a tenant's share: %v", err)
	replays()
	require.NoError(t, s.Complete(ctx, held.Key, held.Token, idem.Outcome{Status: idem.StatusSucceeded}, time.Hour), "a full store stores outcomes")
	require.NoError(t, s.Release(ctx, held2.Key, held2.Token), "a full store releases")
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: key(t, "other", "late"), Token: 1, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err, "the released place is taken")
	require.True(t, c.Claimed)
}
