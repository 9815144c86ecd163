package mysqlstore_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// isolationLevels are the pool defaults the store is tested under, as
// MariaDB's tx_isolation values.
var isolationLevels = []string{"READ-UNCOMMITTED", "READ-COMMITTED", "REPEATABLE-READ", "SERIALIZABLE"}

// isolatedDB is a pool whose sessions run at level (the DSN's
// tx_isolation, as a user sets it).
func isolatedDB(t *testing.T, level string, maxConns int) *sql.DB {
	t.Helper()
	cfg := testConfig(t)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'" + level + "'"
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	var got string
	require.NoError(t, db.QueryRow("SELECT @@tx_isolation").Scan(&got))
	require.Equal(t, level, got)
	return db
}

// The store's reads see committed rows only, whatever the pool's
// isolation level (issue 34, class 3): at each of the four levels, a
// duplicate that arrives between the outcome's UPDATE and the COMMIT is
// told the call is in progress, never replayed the uncommitted outcome;
// the "did it commit?" question of a failed Complete answers no for a row
// its transaction may still roll back; and a lease-mode claim never
// replays an uncommitted final row of another transaction.
func TestIsolationLevels(t *testing.T) {
	for _, level := range isolationLevels {
		t.Run(level, func(t *testing.T) {
			db := isolatedDB(t, level, 8)
			table := newTable(t, db)
			ctx := t.Context()
			s := mysqlstore.NewTx(db, mysqlstore.WithTable(table))
			k, err := idem.NewKey("", "iso.Pay", "k-"+randHex(4))
			require.NoError(t, err)
			req := idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour}
			c, txn, err := s.ClaimTx(ctx, req, 0)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			// The outcome's UPDATE, as Complete runs it, not committed yet.
			tx, ok := mysqlstore.TxFrom(txn.Context(ctx))
			require.True(t, ok)
			_, err = tx.ExecContext(ctx, "UPDATE "+table+" SET status = 2, body = 'uncommitted' WHERE idem_key = ?", k.ID[:])
			require.NoError(t, err)

			dup := req
			dup.Token = 2
			d, dtxn, err := s.ClaimTx(ctx, dup, 0)
			require.NoError(t, err)
			assert.Nil(t, dtxn)
			assert.Equal(t, idem.StatusProcessing, d.Record.Status, "a duplicate was answered %v %q", d.Record.Status, d.Record.Outcome.Body)
			assert.False(t, mysqlstore.Committed(ctx, txn), "an uncommitted outcome was taken for a committed one")

			require.NoError(t, txn.Release(ctx)) // rolled back: the key is free
			c, txn, err = s.ClaimTx(ctx, dup, 0)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			require.NoError(t, txn.Complete(ctx, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("committed")}, time.Hour, false))
			d, _, err = s.ClaimTx(ctx, req, 0)
			require.NoError(t, err)
			assert.Equal(t, "committed", string(d.Record.Outcome.Body))

			// Lease mode: another transaction's final row, not committed.
			ls := mysqlstore.New(db, mysqlstore.WithTable(table), mysqlstore.WithLockTimeout(time.Minute))
			k2, err := idem.NewKey("", "iso.Pay", "k2-"+randHex(4))
			require.NoError(t, err)
			other, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = other.ExecContext(ctx, "INSERT INTO "+table+` (idem_key, token, lease_until, expires_at, created_at, scheme, status,
	fingerprint, tenant, op, key_text, body) VALUES (?, 9, 0, 9000000000000000, 0, 0, 2, ?, '', 'iso.Pay', 'x', 'uncommitted')`,
				k2.ID[:], make([]byte, 32))
			require.NoError(t, err)
			type result struct {
				c   idem.Claim
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := ls.Claim(ctx, idem.ClaimRequest{Key: k2, Token: 3, Lease: time.Minute, TTL: time.Hour})
				done <- result{c, err}
			}()
			time.Sleep(50 * time.Millisecond) // the claim reads (or waits) meanwhile, either way
			require.NoError(t, other.Rollback())
			r := <-done
			require.NoError(t, r.err)
			assert.True(t, r.c.Claimed, "a lease-mode claim answered %v %q", r.c.Record.Status, r.c.Record.Outcome.Body)
			assert.False(t, strings.Contains(string(r.c.Record.Outcome.Body), "uncommitted"))
		})
	}
}
