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

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// partInterval is the partition interval of the tests that do not move
// records far into the past (the shortest WithPartitions accepts); the
// others use wideInterval, so that a table has a few dozen partitions, not
// hundreds.
const (
	partInterval = time.Minute
	wideInterval = 10 * time.Minute
)

// newPartTable migrates a table of its own for the test, partitioned by
// interval, with partitions from past ago up to the present (for records
// moved into the past by partTravel), and drops it at the end.
func newPartTable(t testing.TB, pool *pgxpool.Pool, interval, past time.Duration, opts ...pgstore.Option) string {
	t.Helper()
	ctx := context.Background()
	name := "idem_part_" + randHex(6)
	s := pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable(name), pgstore.WithPartitions(interval)}, opts...)...)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	if past > 0 {
		require.NoError(t, s.CreatePartitions(ctx, time.Now().Add(-past), time.Now()))
	}
	return name
}

// partTravel is timeTravel for a partitioned table: d passes on the store's
// clock for every record (its partition key moves too, so a record moves to
// the partition of its new instants); rows an open transaction holds are
// skipped.
func partTravel(t *testing.T, pool *pgxpool.Pool, table string) func(time.Duration) {
	return func(d time.Duration) {
		_, err := pool.Exec(context.Background(), `UPDATE `+table+` t SET
	lease_until = t.lease_until - $1::interval, expires_at = t.expires_at - $1::interval,
	part_at = t.part_at - $1::interval, created_at = t.created_at - $1::interval
FROM (SELECT tableoid AS o, ctid AS c FROM `+table+` FOR UPDATE SKIP LOCKED) h
WHERE t.tableoid = h.o AND t.ctid = h.c`, d)
		require.NoError(t, err)
	}
}

// TestPartitionConformance runs the store conformance suite on the
// partitioned mode, lease and transactional, its clock advanced by
// partTravel. Options.Sweep is left out: in this mode Sweep drops whole
// partitions, whatever their number of records, instead of at most limit
// records (TestPartitionSweep checks it).
func TestPartitionConformance(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			pool := newPool(t, 80, nil)
			table := newPartTable(t, pool, wideInterval, time.Hour)
			opts := []pgstore.Option{pgstore.WithTable(table), pgstore.WithPartitions(wideInterval)}
			newStore := newLease
			if mode == "tx" {
				newStore = newTx
			}
			down, unmigrated := unusable(pool, newStore, pgstore.WithPartitions(wideInterval))
			var breakTx func(context.Context) error
			if mode == "tx" {
				breakTx = testenv.BreakPGTx(pool)
			}
			idemtest.Run(t, idemtest.Options{
				NewStore: func(t *testing.T) idem.Store {
					if mode == "tx" {
						return pgstore.NewTx(pool, opts...)
					}
					return pgstore.New(pool, opts...)
				},
				Transactional: mode == "tx",
				Sleep:         partTravel(t, pool, pgstore.New(pool, opts...).Table()),
				Unit:          conformanceUnit,
				Down:          down,
				Unmigrated:    unmigrated,
				BreakTx:       breakTx,
			})
		})
	}
}

// liveRows counts the live records of key k in table.
func liveRows(t testing.TB, pool *pgxpool.Pool, table string, k idem.Key) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+
		" WHERE key = $1 AND expires_at > statement_timestamp()", k.ID[:]).Scan(&n))
	return n
}

// TestPartitionRaceExpiredKey: 32 goroutines claim a key whose record
// expired (its partition still there, in a partition of the past or the
// present), in each mode: exactly one claims it, the others see its claim,
// and the table holds one live record.
func TestPartitionRaceExpiredKey(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, 40, nil)
			table := newPartTable(t, pool, wideInterval, 2*time.Hour)
			opts := []pgstore.Option{pgstore.WithTable(table), pgstore.WithPartitions(wideInterval)}
			lease := pgstore.New(pool, opts...)
			var s idem.Store = lease
			if mode == "tx" {
				s = pgstore.NewTx(pool, opts...)
			}
			for round := range 10 {
				k := key(t, "race-"+randHex(4), fmt.Sprint(round))
				r := claimReq(k, "p", time.Minute, time.Minute)
				c, err := lease.Claim(ctx, r)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				if round%2 == 0 {
					require.NoError(t, lease.Complete(ctx, k, r.Token, succeeded("old"), time.Minute))
				}
				// Expire it: by a minute (same partition) or by an hour (a
				// partition of the past).
				back := time.Minute
				if round%3 == 0 {
					back = time.Hour
				}
				_, err = pool.Exec(ctx, `UPDATE `+lease.Table()+` SET lease_until = lease_until - $2::interval,
	expires_at = expires_at - $2::interval, part_at = part_at - $2::interval WHERE key = $1`, k.ID[:], back)
				require.NoError(t, err)

				var claimed atomic.Int32
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := range 32 {
					wg.Go(func() {
						<-start
						req := claimReq(k, "p", time.Minute, time.Minute)
						if g%4 == 3 {
							req = claimReq(k, "other", time.Minute, time.Minute)
						}
						c, err := claimOf(ctx, s, req)
						if !assert.NoError(t, err) {
							return
						}
						if c.Claimed {
							claimed.Add(1)
							return
						}
						assert.NotZero(t, c.Record.Status, "the others see the new record")
					})
				}
				close(start)
				wg.Wait()
				assert.Equal(t, int32(1), claimed.Load(), "round %d: exactly one claim of the expired key", round)
				assert.Equal(t, 1, liveRows(t, pool, lease.Table(), k), "round %d: one live record", round)
			}
		})
	}
}

// claimOf claims req on s: in transactional mode through ClaimTx, whose
// transaction (if it claimed) it commits with the claim still PROCESSING,
// as a lease-mode claim is committed.
func claimOf(ctx context.Context, s idem.Store, req idem.ClaimRequest) (idem.Claim, error) {
	ts, ok := s.(idem.TxStore)
	if !ok {
		return s.Claim(ctx, req)
	}
	c, txn, err := ts.ClaimTx(ctx, req, time.Second)
	if err != nil || txn == nil {
		return c, err
	}
	tx, _ := pgstore.TxFrom(txn.Context(ctx))
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return c, err
	}
	// Commit the claim itself: Complete with a final outcome stores it.
	return c, txn.Complete(ctx, succeeded("tx"), time.Minute, false)
}

// TestPartitionCompleteRacesExpiry: the holder stores its outcome just
// before its record expires, and its transaction is still open (a trigger
// of the test holds it for 600ms) when another caller claims the key, after
// the expiry. The claim must not see the record as expired and claim the
// key beside the outcome being stored (the plain table's unique index
// makes it wait; here the key's lock does): never both an outcome stored
// and a new claim, never two live records.
func TestPartitionCompleteRacesExpiry(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 8, nil)
	table := newPartTable(t, pool, partInterval, 0)
	s := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(partInterval))
	fn := pgx.Identifier{table + "_slow"}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.6); RETURN NEW; END $$;
CREATE TRIGGER slow_complete AFTER UPDATE ON `+s.Table()+` FOR EACH ROW WHEN (NEW.status <> 1) EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP FUNCTION IF EXISTS "+fn+" CASCADE") })
	var completed, claimed int
	for i := range 6 {
		k := key(t, "expiry-"+randHex(4), fmt.Sprint(i))
		r := claimReq(k, "p", time.Minute, time.Minute)
		c, err := s.Claim(ctx, r)
		require.NoError(t, err)
		require.True(t, c.Claimed)
		_, err = pool.Exec(ctx, `UPDATE `+s.Table()+` SET lease_until = statement_timestamp() + interval '200 milliseconds',
	expires_at = statement_timestamp() + interval '200 milliseconds' WHERE key = $1`, k.ID[:])
		require.NoError(t, err)
		var wg sync.WaitGroup
		var cerr error
		wg.Go(func() { cerr = s.Complete(ctx, k, r.Token, succeeded("first"), time.Minute) })
		time.Sleep(400 * time.Millisecond) // past the expiry; the outcome's transaction is open
		c2, err := s.Claim(ctx, claimReq(k, "p", time.Minute, time.Minute))
		require.NoError(t, err)
		wg.Wait()
		if cerr != nil {
			require.ErrorIs(t, cerr, idem.ErrLeaseLost)
		} else {
			completed++
		}
		if c2.Claimed {
			claimed++
		} else if cerr == nil {
			assert.Equal(t, "first", string(c2.Record.Outcome.Body), "round %d: the outcome stored is replayed", i)
		}
		require.False(t, cerr == nil && c2.Claimed, "round %d: an outcome stored and a new claim of the same key", i)
		require.LessOrEqual(t, liveRows(t, pool, s.Table(), k), 1, "round %d: at most one live record", i)
	}
	t.Logf("%d outcomes stored before the expiry, %d keys claimed after it", completed, claimed)
}

// TestPartitionTakeover: 32 goroutines claim a key whose lease lapsed, half
// with its payload: exactly one takes it over (TakenOver), the old holder's
// Complete and Renew are fenced off, and the new holder's outcome replays.
func TestPartitionTakeover(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 40, nil)
	table := newPartTable(t, pool, partInterval, 0)
	s := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(partInterval))
	for round := range 10 {
		k := key(t, "takeover-"+randHex(4), fmt.Sprint(round))
		old := claimReq(k, "p", time.Second, time.Hour)
		c, err := s.Claim(ctx, old)
		require.NoError(t, err)
		require.True(t, c.Claimed)
		_, err = pool.Exec(ctx, `UPDATE `+s.Table()+` SET lease_until = statement_timestamp() - interval '1 second' WHERE key = $1`, k.ID[:])
		require.NoError(t, err)

		var winners sync.Map
		var took atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 32 {
			wg.Go(func() {
				<-start
				f := "p"
				if g%2 == 1 {
					f = "other"
				}
				r := claimReq(k, f, time.Minute, time.Hour)
				c, err := s.Claim(ctx, r)
				if !assert.NoError(t, err) {
					return
				}
				if c.Claimed {
					assert.True(t, c.TakenOver, "the claim took the lapsed lease over")
					assert.Equal(t, "p", f, "only the same payload takes a lapsed lease over")
					took.Add(1)
					winners.Store(r.Token, r)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(1), took.Load(), "round %d: exactly one takeover", round)
		require.ErrorIs(t, s.Complete(ctx, k, old.Token, succeeded("zombie"), time.Hour), idem.ErrLeaseLost)
		require.ErrorIs(t, s.Renew(ctx, k, old.Token, time.Minute), idem.ErrLeaseLost)
		winners.Range(func(_, v any) bool {
			r := v.(idem.ClaimRequest)
			require.NoError(t, s.Complete(ctx, k, r.Token, succeeded("heir"), time.Hour))
			c, err := s.Claim(ctx, claimReq(k, "p", time.Minute, time.Hour))
			require.NoError(t, err)
			require.False(t, c.Claimed)
			assert.Equal(t, "heir", string(c.Record.Outcome.Body))
			assert.Equal(t, r.Token, c.Record.Token)
			return true
		})
		assert.Equal(t, 1, liveRows(t, pool, s.Table(), k))
	}
}

// TestPartitionCompleteMoves: an outcome whose TTL reaches beyond the
// claim's partition moves the record to a later partition; it is replayed,
// completed once, and survives the drop of the claim's partition.
func TestPartitionCompleteMoves(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, 8, nil)
	table := newPartTable(t, pool, partInterval, 0)
	s := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(partInterval))
	k := key(t, "move-"+randHex(4), "1")
	r := claimReq(k, "p", time.Minute, time.Minute)
	c, err := s.Claim(ctx, r)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT part_at FROM "+s.Table()+" WHERE key = $1", k.ID[:]).Scan(&before))
	require.NoError(t, s.Complete(ctx, k, r.Token, succeeded("long"), time.Hour))
	require.NoError(t, s.Complete(ctx, k, r.Token, succeeded("long"), time.Hour), "a repeated Complete answers nil")
	var after, expires time.Time
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), max(part_at), max(expires_at) FROM "+s.Table()+" WHERE key = $1",
		k.ID[:]).Scan(&n, &after, &expires))
	assert.Equal(t, 1, n, "moved, not copied")
	assert.True(t, after.After(before.Add(50*time.Minute)), "the record moved to the partition of its new expiry")
	assert.False(t, expires.After(after))
	c, err = s.Claim(ctx, claimReq(k, "p", time.Minute, time.Minute))
	require.NoError(t, err)
	require.False(t, c.Claimed)
	assert.Equal(t, "long", string(c.Record.Outcome.Body))
}

// TestPartitionSweep: with the clock moved an hour and a half ahead of the
// first records (partTravel), Sweep drops the partitions whose records have
// all expired, whole (no row of them is deleted one by one: the partitions
// are gone), keeps every live record, and creates partitions ahead of the
// clock for the longest TTL the store has seen; a second Sweep drops
// nothing. A claim of a TTL longer than the partitions ahead creates the
// partitions it needs.
func TestPartitionSweep(t *testing.T) {
	for _, archive := range []bool{false, true} {
		t.Run(map[bool]string{false: "drop", true: "archive"}[archive], func(t *testing.T) {
			ctx := context.Background()
			pool := newPool(t, 8, nil)
			opts := []pgstore.Option{pgstore.WithPartitions(partInterval)}
			var archiveName string
			if archive {
				archiveName = "idem_parch_" + randHex(6)
				opts = append(opts, pgstore.WithArchive(archiveName))
				t.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{archiveName}.Sanitize()) })
			}
			table := newPartTable(t, pool, partInterval, 2*time.Hour, opts...)
			s := pgstore.New(pool, append(opts, pgstore.WithTable(table))...)
			tenant := "psweep-" + randHex(4)
			const old, live = 200, 50
			for i := range old {
				r := claimReq(key(t, tenant, fmt.Sprint("old", i)), "p", time.Minute, 10*time.Minute)
				c, err := s.Claim(ctx, r)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				if i%2 == 0 {
					require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("old"), 10*time.Minute))
				}
			}
			before, err := s.PartitionBounds(ctx)
			require.NoError(t, err)
			partTravel(t, pool, s.Table())(90 * time.Minute)
			var liveReqs []idem.ClaimRequest
			for i := range live {
				r := claimReq(key(t, tenant, fmt.Sprint("live", i)), "p", time.Minute, 10*time.Minute)
				c, err := s.Claim(ctx, r)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("live"), 10*time.Minute))
				liveReqs = append(liveReqs, r)
			}

			var now time.Time
			require.NoError(t, pool.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now))
			removed, err := s.Sweep(ctx, 7)
			require.NoError(t, err)
			if archive {
				assert.Equal(t, old, removed, "archiving counts the records it copies")
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{archiveName}.Sanitize()+
					" WHERE tenant = $1", []byte(tenant)).Scan(&n))
				assert.Equal(t, old, n, "every record of the dropped partitions is archived")
			}
			after, err := s.PartitionBounds(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, after)
			for _, b := range after {
				assert.True(t, b[1].After(now), "partition %v–%v is due and was dropped", b[0], b[1])
			}
			assert.Less(t, len(after), len(before), "due partitions were dropped")
			assert.False(t, after[0][0].After(now), "the present is covered")
			assert.False(t, after[len(after)-1][1].Before(now.Add(10*time.Minute+2*partInterval)),
				"partitions are created ahead for the longest TTL and two intervals: the last ends at %v, now is %v", after[len(after)-1][1], now)
			for i := 1; i < len(after); i++ {
				assert.Equal(t, after[i-1][1], after[i][0], "no gap between partitions")
			}

			var left int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Table()+" WHERE tenant = $1", []byte(tenant)).Scan(&left))
			assert.Equal(t, live, left, "only the live records are left")
			for _, r := range liveReqs {
				c, err := s.Claim(ctx, claimReq(r.Key, "p", time.Minute, 10*time.Minute))
				require.NoError(t, err)
				require.False(t, c.Claimed, "a live record survives Sweep")
				assert.Equal(t, "live", string(c.Record.Outcome.Body))
			}
			again, err := s.Sweep(ctx, 0)
			require.NoError(t, err)
			assert.Zero(t, again, "nothing is due after a sweep")

			// A TTL beyond the partitions ahead: the claim creates what it needs.
			r := claimReq(key(t, tenant, "long"), "p", time.Minute, 6*time.Hour)
			c, err := s.Claim(ctx, r)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			require.NoError(t, s.Complete(ctx, r.Key, r.Token, succeeded("long"), 6*time.Hour))
		})
	}
}

// TestPartitionMigrateRefusesPlainTable: WithPartitions on a table of the
// plain layout is refused by Migrate, naming it; an invalid interval panics
// in New.
func TestPartitionMigrateRefusesPlainTable(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	err := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithPartitions(time.Hour)).Migrate(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not partitioned")
	for _, iv := range []time.Duration{time.Second, 90500 * time.Millisecond, -time.Hour} {
		assert.Panics(t, func() { pgstore.New(pool, pgstore.WithPartitions(iv)) }, "interval %v", iv)
	}
	assert.NotPanics(t, func() { pgstore.New(pool, pgstore.WithPartitions(90*time.Second)) })
}
