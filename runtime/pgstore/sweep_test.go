package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestSweep: two sweepers (two pools, as two processes would) delete expired
// rows in small batches while claims run on the same keys and on new ones:
// every live row survives, every expired row that no claim revived is gone.
func TestSweep(t *testing.T) {
	for _, archive := range []bool{false, true} {
		t.Run(map[bool]string{false: "delete", true: "archive"}[archive], func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, 8, nil)
			var opts []pgstore.Option
			var archiveName string
			if archive {
				archiveName = "idem_arch_" + randHex(6)
				opts = append(opts, pgstore.WithArchive(archiveName))
				t.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{archiveName}.Sanitize()) })
			}
			table := newTable(t, pool, opts...)
			opts = append(opts, pgstore.WithTable(table))
			s := pgstore.New(pool, opts...)
			tenant := "sweep-" + randHex(4)

			// Every record is claimed with a TTL of a minute; the first
			// `expired` ones are then moved into the past by SQL, so that no
			// record expires or stays live by the timing of the machine.
			const expired, live = 300, 100
			var expiredIDs [][]byte
			for i := range expired + live {
				r := claimReq(key(t, tenant, fmt.Sprint(i)), "p", time.Minute, time.Minute)
				c, err := s.Claim(ctx, r)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				if i%2 == 0 { // half PROCESSING, half SUCCEEDED
					require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("x"), time.Minute))
				}
				if i < expired {
					expiredIDs = append(expiredIDs, r.Key.ID[:])
				}
			}
			expire(t, pool, s.Table(), expiredIDs)

			var swept atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 2 {
				other := pgstore.New(newPool(t, 2, nil), opts...)
				wg.Go(func() {
					for {
						n, err := other.Sweep(ctx, 7)
						if !assert.NoError(t, err) {
							return
						}
						swept.Add(int64(n))
						select {
						case <-stop:
							return
						default:
						}
					}
				})
			}
			// Meanwhile: revive every third expired key, claim new keys.
			var claimers sync.WaitGroup
			for w := range 4 {
				claimers.Go(func() {
					for i := w; i < expired; i += 4 {
						if i%3 == 0 {
							c, err := s.Claim(ctx, claimReq(key(t, tenant, fmt.Sprint(i)), "q", time.Minute, time.Minute))
							if assert.NoError(t, err) {
								assert.True(t, c.Claimed, "an expired key behaves as absent")
							}
						}
						c, err := s.Claim(ctx, claimReq(key(t, tenant, fmt.Sprint("new", i)), "p", time.Minute, time.Minute))
						if assert.NoError(t, err) {
							assert.True(t, c.Claimed)
						}
					}
				})
			}
			claimers.Wait()
			close(stop)
			wg.Wait()
			n, err := s.Sweep(ctx, 0)
			require.NoError(t, err)
			swept.Add(int64(n))
			left0, err := s.Sweep(ctx, 0)
			require.NoError(t, err)
			assert.Zero(t, left0, "Sweep(0) removed every expired record")

			revived := (expired + 2) / 3
			var left, stale int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE expires_at <= now()) FROM "+
				s.Table()+" WHERE tenant = $1", []byte(tenant)).Scan(&left, &stale))
			assert.Zero(t, stale, "no expired row is left")
			assert.Equal(t, live+revived+expired, left, "live, revived and new rows all survive")
			for i := range expired + live {
				c, err := s.Claim(ctx, claimReq(key(t, tenant, fmt.Sprint(i)), "p", time.Minute, time.Minute))
				require.NoError(t, err)
				switch {
				case i >= expired:
					assert.False(t, c.Claimed, "live row %d survived", i)
					assert.Equal(t, fp("p"), c.Record.Fingerprint)
				case i%3 == 0:
					assert.False(t, c.Claimed, "revived row %d survived", i)
					assert.Equal(t, fp("q"), c.Record.Fingerprint)
				default:
					assert.True(t, c.Claimed, "expired row %d is gone", i)
				}
			}
			// A revived key was either swept first (and inserted anew) or
			// taken over in place (and never swept).
			assert.GreaterOrEqual(t, swept.Load(), int64(expired-revived))
			assert.LessOrEqual(t, swept.Load(), int64(expired))
			t.Logf("swept %d of %d expired rows (%d revived)", swept.Load(), expired, revived)
			if archive {
				var archived int64
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{archiveName}.Sanitize()+
					" WHERE tenant = $1 AND archived_at IS NOT NULL AND expires_at < archived_at", []byte(tenant)).Scan(&archived))
				assert.Equal(t, swept.Load(), archived, "every swept row is archived")
			}
		})
	}
}

// expire moves the records with the given key IDs an hour into the past:
// expired, due for the sweeper, their leases lapsed.
func expire(t testing.TB, pool *pgxpool.Pool, table string, ids [][]byte) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE `+table+` SET lease_until = lease_until - interval '1 hour',
		expires_at = expires_at - interval '1 hour', sweep_at = sweep_at - interval '1 hour',
		created_at = created_at - interval '1 hour' WHERE key = ANY($1::bytea[])`, ids)
	require.NoError(t, err)
}

// insertExpired inserts n SUCCEEDED records of tenant that expired a second
// ago.
func insertExpired(t testing.TB, pool *pgxpool.Pool, table, tenant string, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO `+table+` (key, tenant, op, fingerprint, status, token,
		lease_until, expires_at, sweep_at)
		SELECT sha256(($1::text || i::text)::bytea), $1::text::bytea, 'op', sha256(''), 2, i,
			now() - interval '1 second', now() - interval '1 second', now() - interval '1 second'
		FROM generate_series(1, $2::int) i`, tenant, n)
	require.NoError(t, err)
}

// TestSweepLimit: Sweep(ctx, n) removes at most n expired records and says
// how many (the meaning every store shares); Sweep(ctx, 0) removes them all.
func TestSweepLimit(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 2, nil)
	s := pgstore.New(pool, pgstore.WithTable(newTable(t, pool)))
	insertExpired(t, pool, s.Table(), "b", 2500)
	for _, want := range []int{1000, 1000, 500, 0} {
		n, err := s.Sweep(ctx, 1000)
		require.NoError(t, err)
		assert.Equal(t, want, n)
	}
	insertExpired(t, pool, s.Table(), "c", 7)
	n, err := s.Sweep(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 3, n, "at most the limit")
	n, err = s.Sweep(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 4, n, "0: all the rest")
	insertExpired(t, pool, s.Table(), "d", 2*pgstore.DefaultSweepBatch+1)
	n, err = s.Sweep(ctx, -1)
	require.NoError(t, err)
	assert.Equal(t, 2*pgstore.DefaultSweepBatch+1, n, "<0: all, in statements of DefaultSweepBatch")
}

// TestSweepLiveCandidates: records whose outcome was stored after their
// claim are due for a look (sweep_at, set by the claim) before they expire
// (expires_at, set by Complete, which leaves the index alone). The sweeper
// keeps them, moves them to their expiry, and still removes the expired
// records behind them within the same call.
func TestSweepLiveCandidates(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 2, nil)
	s := pgstore.New(pool, pgstore.WithTable(newTable(t, pool)))
	var liveIDs [][]byte
	for i := range 5 {
		r := claimReq(key(t, "live", fmt.Sprint(i)), "p", time.Minute, time.Minute)
		_, err := s.Claim(ctx, r)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("x"), time.Minute))
		liveIDs = append(liveIDs, r.Key.ID[:])
	}
	// Due for a look an hour ago, live for a minute more.
	_, err := pool.Exec(ctx, `UPDATE `+s.Table()+` SET sweep_at = now() - interval '2 hours' WHERE key = ANY($1::bytea[])`, liveIDs)
	require.NoError(t, err)
	insertExpired(t, pool, s.Table(), "dead", 10)

	n, err := s.Sweep(ctx, 8)
	require.NoError(t, err)
	assert.Equal(t, 8, n, "the live candidates looked at first do not use up the limit")
	n, err = s.Sweep(ctx, 8)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	var live, moved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE sweep_at = expires_at) FROM `+
		s.Table()+` WHERE key = ANY($1::bytea[])`, liveIDs).Scan(&live, &moved))
	assert.Equal(t, 5, live, "live records are kept")
	assert.Equal(t, 5, moved, "and moved to their expiry")
}

// TestCompleteIsHOT: storing an outcome changes no indexed column, so
// PostgreSQL can update the row in place (a HOT update, no index write).
func TestCompleteIsHOT(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 1, nil) // one backend, whose statistics the test flushes
	s := pgstore.New(pool, pgstore.WithTable(newTable(t, pool)))
	const n = 200
	for i := range n {
		r := claimReq(key(t, "hot", fmt.Sprint(i)), "p", time.Minute, time.Minute)
		_, err := s.Claim(ctx, r)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("result"), time.Minute))
	}
	// A backend reports its statistics with a delay: have it flush them
	// when the next statement ends.
	var upd, hot int64
	_, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = to_regclass($1)`,
			s.Table()).Scan(&upd, &hot)
		return err == nil && upd >= n
	}, 30*time.Second, 50*time.Millisecond)
	t.Logf("%d updates, %d HOT", upd, hot)
	assert.GreaterOrEqual(t, hot*10, upd*9, "at least 90%% of the Completes are HOT updates")
}
