package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestTxFlightLateDuplicate: a duplicate that joins a key's flight after
// the leader's claim batch was sent must not be answered the leader's
// replay, which the database decided before the duplicate was called: the
// record may have expired (and been swept) in between, and the duplicate
// would replay a record that was gone when it called (the storm's sweep
// scenario found it: a claim called after the record's TTL was answered
// with it). Here the record expires right after the leader's answer, and
// a duplicate joins then: it must claim the key. Then the sweep: a record
// deleted by the sweeper after the leader's answer.
func TestTxFlightLateDuplicate(t *testing.T) {
	expire := func(ctx context.Context, s *pgstore.TxStore, table string, k idem.Key) error {
		_, err := s.Pool().Exec(ctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+
			" SET expires_at = statement_timestamp() - interval '1 hour', sweep_at = statement_timestamp() - interval '1 hour' WHERE key = $1", k.ID[:])
		return err
	}
	for _, tc := range []struct {
		name string
		gone func(ctx context.Context, s *pgstore.TxStore, table string, k idem.Key) error
	}{
		{"expired", expire},
		{"swept", func(ctx context.Context, s *pgstore.TxStore, table string, k idem.Key) error {
			if err := expire(ctx, s, table, k); err != nil {
				return err
			}
			n, err := s.Sweep(ctx, 100)
			if err == nil && n != 1 {
				t.Errorf("swept %d records, want 1", n)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			pool := newPool(t, 4, nil)
			table := newTable(t, pool)
			s := pgstore.NewTx(pool, pgstore.WithTable(table))
			k := key(t, "t", "late-"+randHex(4))

			c, txn, err := s.ClaimTx(ctx, claimReq(k, "p", time.Minute, time.Hour), 0)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			require.NoError(t, txn.Complete(ctx, succeeded("first"), time.Hour, false))

			var (
				once    sync.Once
				joined  = make(chan struct{})
				done    = make(chan struct{})
				late    idem.Claim
				lateTxn idem.Txn
				lateErr error
			)
			s.SetFlightHooks(func() {
				once.Do(func() {
					// The leader has its replay; the record goes, then a
					// duplicate is called and joins the flight.
					require.NoError(t, tc.gone(ctx, s, table, k))
					go func() {
						defer close(done)
						late, lateTxn, lateErr = s.ClaimTx(ctx, claimReq(k, "p", time.Minute, time.Hour), 0)
					}()
					<-joined
				})
			}, func() {
				select {
				case <-joined:
				default:
					close(joined)
				}
			})

			first, _, err := s.ClaimTx(ctx, claimReq(k, "p", time.Minute, time.Hour), 0)
			require.NoError(t, err)
			require.False(t, first.Claimed)
			require.Equal(t, "first", string(first.Record.Outcome.Body), "the leader replays the record it found")
			<-done
			require.NoError(t, lateErr)
			require.True(t, late.Claimed, "a duplicate called after the record was gone was answered %v %q", late.Record.Status, late.Record.Outcome.Body)
			require.NoError(t, lateTxn.Release(ctx))
		})
	}
}
