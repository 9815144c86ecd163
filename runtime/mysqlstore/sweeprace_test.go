package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// The storm's sweep scenario on mysql-tx failed once (issue 23) with a
// claim that InnoDB chose as the victim of a deadlock with Sweep: the
// claim's takeover of an expired record held the row and waited for the
// record's entry in the expiry index, which Sweep's DELETE had locked while
// it scanned that index, waiting in turn for the row. These tests hold the
// two sides of that cycle apart: Sweep waits for no row it did not pick,
// and a claim whose statement the server rolls back to break a deadlock
// decides again instead of failing.

// expired stores n final records in table, each under a key of its own, and
// moves the table's clock two hours on: every one of them has expired.
func expired(t *testing.T, db *sql.DB, table string, n int) []idem.Key {
	t.Helper()
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	keys := make([]idem.Key, n)
	for i := range keys {
		k, err := idem.NewKey("", "sweeprace.Op", fmt.Sprintf("k%03d-%s", i, randHex(4)))
		require.NoError(t, err)
		keys[i] = k
		tok := idem.Token(i + 1)
		c, err := s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: tok, Lease: time.Hour, TTL: time.Hour})
		require.NoError(t, err)
		require.True(t, c.Claimed)
		require.NoError(t, s.Complete(t.Context(), k, tok, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("done")}, time.Hour))
	}
	timeTravel(t, db, table)(2 * time.Hour)
	return keys
}

// TestSweepWaitsForNoClaim: an expired record is taken over by a claim
// whose transaction stays open (transactional mode: the method runs), and
// Sweep runs meanwhile, in batches as large as the table and as small as
// one record. Sweep removes every other expired record and returns at once:
// it neither deletes the held record nor waits for its transaction. The
// sweeping sessions give up a lock wait after a second
// (innodb_lock_wait_timeout=1), so a Sweep that waited for the claim fails
// instead of hanging.
func TestSweepWaitsForNoClaim(t *testing.T) {
	for _, batch := range []int{0, 7, 1} {
		t.Run(fmt.Sprintf("limit=%d", batch), func(t *testing.T) {
			db := newDB(t, 8)
			table := newTable(t, db)
			const n = 120
			keys := expired(t, db, table, n)
			held := keys[n/2]

			ts := mysqlstore.NewTx(db, mysqlstore.WithTable(table))
			c, txn, err := ts.ClaimTx(t.Context(), idem.ClaimRequest{Key: held, Token: 1000, Lease: time.Hour, TTL: time.Hour}, 0)
			require.NoError(t, err)
			require.True(t, c.Claimed, "the expired record is taken")
			defer func() { _ = txn.Release(context.Background()) }()

			sweeper := mysqlstore.New(withParams(t, 2, map[string]string{"innodb_lock_wait_timeout": "1"}), mysqlstore.WithTable(table))
			removed := 0
			for {
				limit := batch
				if limit == 0 {
					limit = n // one call, batches of DefaultSweepBatch
				}
				got, err := sweeper.Sweep(t.Context(), limit)
				require.NoError(t, err, "Sweep waited for the claim's row (after %d removed)", removed)
				removed += got
				if got < limit {
					break
				}
			}
			assert.Equal(t, n-1, removed, "every expired record but the held one")

			require.NoError(t, txn.Complete(t.Context(), idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("again")}, time.Hour, false))
			c, err = ts.Claim(t.Context(), idem.ClaimRequest{Key: held, Token: 1001, Lease: time.Hour, TTL: time.Hour})
			require.NoError(t, err)
			assert.Equal(t, []byte("again"), c.Record.Outcome.Body, "the claim's outcome is stored")
			got, err := sweeper.Sweep(t.Context(), 0)
			require.NoError(t, err)
			assert.Zero(t, got)
		})
	}
}

// TestClaimDeadlockVictim: the takeover of an expired record meets a
// deadlock and InnoDB rolls the claim's statement back (its transaction is
// the lighter one). Nothing was decided, so the claim reads the record
// again and takes it: no store error, in either mode. The other side of
// the cycle is a transaction that holds a shared lock on the record's entry
// in the expiry index (Sweep's DELETE held such an entry in the storm): the
// takeover rewrites that entry and waits for it; the other transaction then
// asks for the row the claim holds.
func TestClaimDeadlockVictim(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			db := newDB(t, 8)
			table := newTable(t, db)
			ledger := newLedger(t, db)
			k := expired(t, db, table, 1)[0]
			var expiresAt int64
			require.NoError(t, db.QueryRow("SELECT expires_at FROM "+table+" WHERE idem_key = ?", k.ID[:]).Scan(&expiresAt))

			other, err := db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			defer func() { _ = other.Rollback() }()
			for i := range 50 { // the heavier transaction: InnoDB rolls the claim back
				_, err := other.Exec("INSERT INTO "+ledger+" (order_id, v) VALUES ('heavy', ?)", i)
				require.NoError(t, err)
			}
			var one int64
			require.NoError(t, other.QueryRow("SELECT expires_at FROM "+table+" FORCE INDEX ("+table+"_expires_at_idx) WHERE expires_at = ? LOCK IN SHARE MODE",
				expiresAt).Scan(&one))

			req := idem.ClaimRequest{Key: k, Token: 2000, Lease: time.Hour, TTL: time.Hour}
			type result struct {
				c   idem.Claim
				txn idem.Txn
				err error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				if mode == "tx" {
					r.c, r.txn, r.err = mysqlstore.NewTx(db, mysqlstore.WithTable(table), mysqlstore.WithLockTimeout(time.Minute)).ClaimTx(t.Context(), req, 0)
				} else {
					r.c, r.err = mysqlstore.New(db, mysqlstore.WithTable(table), mysqlstore.WithLockTimeout(time.Minute)).Claim(t.Context(), req)
				}
				done <- r
			}()
			waitForLockWait(t, db, table)
			// Closes the cycle: the claim holds the row and waits for the
			// index entry this transaction holds.
			_, err = other.Exec("SELECT 1 FROM "+table+" WHERE idem_key = ? FOR UPDATE", k.ID[:])
			require.NoError(t, err, "the heavier transaction goes on")
			require.NoError(t, other.Rollback())

			r := <-done
			require.NoError(t, r.err, "a deadlock's victim decided nothing: the claim decides again")
			assert.True(t, r.c.Claimed, "the expired record is taken")
			if r.txn != nil {
				require.NoError(t, r.txn.Complete(t.Context(), idem.Outcome{Status: idem.StatusSucceeded}, time.Hour, false))
			}
			assert.Contains(t, latestDeadlock(t, db), table, "the server broke a deadlock on the table")
		})
	}
}

// waitForLockWait returns once a transaction waits for a lock while it runs
// a statement on table (the server's view, polled; not a timing guess). The
// server refreshes INNODB_TRX only when nobody read it for 100ms, so the
// polls are further apart than that.
func waitForLockWait(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	for guard := time.Now().Add(30 * time.Second); ; time.Sleep(150 * time.Millisecond) {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?",
			"%"+table+"%").Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(guard), "no statement on %s ever waited for a lock", table)
	}
}

// latestDeadlock returns the server's account of the latest deadlock it
// detected (SHOW ENGINE INNODB STATUS).
func latestDeadlock(t *testing.T, db *sql.DB) string {
	t.Helper()
	var typ, name, status string
	require.NoError(t, db.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status))
	_, after, ok := strings.Cut(status, "LATEST DETECTED DEADLOCK")
	if !ok {
		return ""
	}
	before, _, _ := strings.Cut(after, "\nTRANSACTIONS\n")
	return before
}
