package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
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

			const expired, live = 300, 100
			for i := range expired + live {
				ttl := time.Minute
				if i < expired {
					ttl = 100 * time.Millisecond
				}
				r := claimReq(key(t, tenant, fmt.Sprint(i)), "p", ttl, ttl)
				c, err := s.Claim(ctx, r)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				if i%2 == 0 { // half PROCESSING, half SUCCEEDED
					require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("x"), ttl))
				}
			}
			time.Sleep(150 * time.Millisecond)

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

			revived := (expired + 2) / 3
			var left, stale int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE expires_at <= now()) FROM "+
				s.Table()+" WHERE tenant = $1", tenant).Scan(&left, &stale))
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
					" WHERE tenant = $1 AND archived_at IS NOT NULL AND expires_at < archived_at", tenant).Scan(&archived))
				assert.Equal(t, swept.Load(), archived, "every swept row is archived")
			}
		})
	}
}

// TestSweepBatches: Sweep works through more rows than one batch holds.
func TestSweepBatches(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 2, nil)
	s := pgstore.New(pool, pgstore.WithTable(newTable(t, pool)))
	_, err := pool.Exec(ctx, `INSERT INTO `+s.Table()+` (tenant, op, key, fingerprint, status, token, lease_until, expires_at)
		SELECT 'b', 'op', sha256(i::text::bytea), sha256(''), 2, i, now(), now() - interval '1 second'
		FROM generate_series(1, 2500) i`)
	require.NoError(t, err)
	n, err := s.Sweep(ctx, 1000)
	require.NoError(t, err)
	assert.Equal(t, 2500, n)
	n, err = s.Sweep(ctx, 1000)
	require.NoError(t, err)
	assert.Zero(t, n)
	_ = idem.StatusSucceeded
}
