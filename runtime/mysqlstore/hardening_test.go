package mysqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// call runs one idempotent call of op with key part id, payload amount,
// through ex; fn is the method.
func call(ctx context.Context, ex *idem.Executor, m *idem.Method, id string, amount int64, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.Int(amount)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

// newLedger creates a business table of the test's own and returns its name.
func newLedger(t testing.TB, db *sql.DB) string {
	t.Helper()
	name := "idem_test_ledger_" + randHex(4)
	_, err := db.Exec("CREATE TABLE " + name + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id VARCHAR(64) NOT NULL, v VARCHAR(64) NOT NULL) ENGINE = InnoDB")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

func rows(t testing.TB, db *sql.DB, ledger, order string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+ledger+" WHERE order_id = ?", order).Scan(&n))
	return n
}

// TestDuplicatesExactlyOnce: many concurrent duplicates of one call, over
// several keys, through idem.Do, in both modes. The method runs once per key
// (in transactional mode: one committed business row per key, written
// through TxFrom), every duplicate that succeeds gets the first call's
// result, and the others are told the call is in progress.
func TestDuplicatesExactlyOnce(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			db := newDB(t, 40)
			table := newTable(t, db)
			ledger := newLedger(t, db)
			var store idem.Store = mysqlstore.New(db, mysqlstore.WithTable(table))
			if mode == "tx" {
				store = mysqlstore.NewTx(db, mysqlstore.WithTable(table))
			}
			ex := idem.NewExecutor(store, idem.SingleTenant())
			m := &idem.Method{Op: "dup.Pay", TTL: time.Hour, Lease: time.Hour, Wait: 10 * time.Second}
			const keys, dups = 4, 16
			var runs [keys]atomic.Int32
			var wg sync.WaitGroup
			results := make([][]string, keys)
			errs := make([][]error, keys)
			for k := range keys {
				results[k], errs[k] = make([]string, dups), make([]error, dups)
				order := "order-" + randHex(4)
				for d := range dups {
					wg.Go(func() {
						results[k][d], errs[k][d] = call(t.Context(), ex, m, order, 100, func(ctx context.Context) (string, error) {
							n := runs[k].Add(1)
							v := order + "-run-" + string(rune('0'+n))
							if tx, ok := mysqlstore.TxFrom(ctx); ok {
								if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, ?)", order, v); err != nil {
									return "", err
								}
							}
							time.Sleep(5 * time.Millisecond) // keep the key held while duplicates arrive
							return v, nil
						})
					})
				}
				wg.Wait()
				if mode == "tx" {
					assert.Equal(t, 1, rows(t, db, ledger, order), "one committed business row for %s", order)
				}
				assert.Equal(t, int32(1), runs[k].Load(), "the method ran once for %s", order)
				for d := range dups {
					if errs[k][d] != nil {
						assert.ErrorIs(t, errs[k][d], idem.ErrInProgress)
						continue
					}
					assert.Equal(t, order+"-run-1", results[k][d])
				}
			}
		})
	}
}

// withParams returns a database on the test server whose sessions set the
// given system variables.
func withParams(t testing.TB, maxConns int, params map[string]string) *sql.DB {
	t.Helper()
	cfg := testConfig(t)
	cfg.Params = params
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestLockWaitTimeoutIsTransient: a Complete that waits for a row lock held
// by another transaction past the server's innodb_lock_wait_timeout fails
// with the server's error 1205, named transient; nothing is decided: the
// record stays the caller's, and once the lock is gone the same Complete
// stores the outcome.
func TestLockWaitTimeoutIsTransient(t *testing.T) {
	db := withParams(t, 8, map[string]string{"innodb_lock_wait_timeout": "1"})
	table := newTable(t, db)
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	k, err := idem.NewKey("", "lock.Op", randHex(4))
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Token: 7, Lease: time.Hour, TTL: time.Hour}
	c, err := s.Claim(t.Context(), req)
	require.NoError(t, err)
	require.True(t, c.Claimed)

	blocker, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var one int
	require.NoError(t, blocker.QueryRow("SELECT 1 FROM "+table+" WHERE idem_key = ? FOR UPDATE", k.ID[:]).Scan(&one))
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}
	err = s.Complete(t.Context(), k, 7, out, time.Hour)
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, uint16(1205), me.Number)
	assert.Contains(t, err.Error(), "transient")
	assert.Contains(t, err.Error(), k.Hex())
	assert.NotErrorIs(t, err, idem.ErrLeaseLost)
	require.NoError(t, blocker.Rollback())

	require.NoError(t, s.Complete(t.Context(), k, 7, out, time.Hour), "the record is still the caller's")
	c, err = s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 8, Lease: time.Hour, TTL: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, idem.StatusSucceeded, c.Record.Status)
	assert.Equal(t, []byte("ok"), c.Record.Outcome.Body)
}

// TestDeadlockInMethod: in transactional mode the method's own writes meet
// a deadlock and InnoDB picks the method's transaction as its victim,
// rolling all of it back, the claim included. The method returns the
// error (a transient one: the key is released), the record is not stored,
// and the retry runs the method once more: one committed business row.
func TestDeadlockInMethod(t *testing.T) {
	db := newDB(t, 8)
	table := newTable(t, db)
	ledger := newLedger(t, db)
	_, err := db.Exec("INSERT INTO " + ledger + " (id, order_id, v) VALUES (1, 'a', 'a'), (2, 'b', 'b')")
	require.NoError(t, err)
	ex := idem.NewExecutor(mysqlstore.NewTx(db, mysqlstore.WithTable(table)), idem.SingleTenant())
	m := &idem.Method{Op: "deadlock.Op", TTL: time.Hour, Lease: time.Hour}
	order := "order-" + randHex(4)

	other, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = other.Rollback() }()
	// The other transaction is the heavier one (more rows changed), so
	// InnoDB rolls the method's back.
	for i := range 20 {
		_, err := other.Exec("INSERT INTO "+ledger+" (order_id, v) VALUES ('heavy', ?)", i)
		require.NoError(t, err)
	}
	var runs atomic.Int32
	otherDone := make(chan error, 1)
	// A bound, so that a lock wait the test did not plan fails it instead
	// of hanging (the server's innodb_lock_wait_timeout is 50s).
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = call(ctx, ex, m, order, 1, func(ctx context.Context) (string, error) {
		runs.Add(1)
		tx, _ := mysqlstore.TxFrom(ctx)
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, 'first')", order); err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+ledger+" SET v = 'm' WHERE id = 1"); err != nil {
			return "", err
		}
		if _, err := other.ExecContext(ctx, "UPDATE "+ledger+" SET v = 'o' WHERE id = 2"); err != nil {
			return "", err
		}
		// Each now waits for the other's row: whichever request closes the
		// cycle, InnoDB rolls back the lighter transaction, the method's.
		go func() {
			_, err := other.Exec("UPDATE " + ledger + " SET v = 'o' WHERE id = 1") // waits for the method
			otherDone <- err
		}()
		_, err := tx.ExecContext(ctx, "UPDATE "+ledger+" SET v = 'm' WHERE id = 2")
		return "", err
	})
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me, "the method's deadlock is its error")
	assert.Equal(t, uint16(1213), me.Number)
	require.NoError(t, <-otherDone, "the other transaction went on")
	require.NoError(t, other.Rollback())
	assert.Equal(t, 0, rows(t, db, ledger, order), "the victim's writes are gone")

	v, err := call(t.Context(), ex, m, order, 1, func(ctx context.Context) (string, error) {
		runs.Add(1)
		tx, _ := mysqlstore.TxFrom(ctx)
		_, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, 'retry')", order)
		return "retried", err
	})
	require.NoError(t, err, "the key was released")
	assert.Equal(t, "retried", v)
	assert.Equal(t, 1, rows(t, db, ledger, order))
	v, err = call(t.Context(), ex, m, order, 1, func(context.Context) (string, error) {
		runs.Add(1)
		return "", errors.New("must not run")
	})
	require.NoError(t, err)
	assert.Equal(t, "retried", v, "replayed")
	assert.Equal(t, int32(2), runs.Load())
}

// proxied returns a database whose connections go through a lossy proxy in
// front of the test server.
func proxied(t *testing.T, maxConns int) (*sql.DB, *lossyproxy.Proxy) {
	cfg := testConfig(t)
	p := lossyproxy.New(t, cfg.Addr)
	cfg.Addr = p.Addr()
	cfg.Logger = &mysql.NopLogger{} // lost connections are the point
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestLostRepliesThroughDo: the reply to a claim or to the outcome is lost
// on its way back (the proxy forwards the request, the server applies it,
// the connection breaks). The method's effect happens once; the caller that
// succeeded is told so (lease mode: the executor repeats Complete with its
// token; transactional mode: the store asks whether its COMMIT committed),
// or, when the claim's reply was lost, is told to retry and its retry runs.
func TestLostRepliesThroughDo(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		for _, lost := range []string{"claim", "outcome"} {
			t.Run(mode+"/"+lost, func(t *testing.T) {
				db, proxy := proxied(t, 4)
				table := newTable(t, db)
				ledger := newLedger(t, db)
				var store idem.Store = mysqlstore.New(db, mysqlstore.WithTable(table))
				if mode == "tx" {
					store = mysqlstore.NewTx(db, mysqlstore.WithTable(table))
				}
				ex := idem.NewExecutor(store, idem.SingleTenant())
				m := &idem.Method{Op: "lost.Op", TTL: time.Hour, Lease: time.Hour}
				id := "lost-" + randHex(4)
				k, err := idem.NewKey("", m.Op, id)
				require.NoError(t, err)
				receipt := "receipt-" + randHex(8)
				// The claim's insert is the statement that carries the key
				// and the operation's name; the outcome's last request is
				// the one with the receipt (lease mode) or the COMMIT after
				// it (transactional mode).
				match := func(req []byte) bool { return bytes.Contains(req, k.ID[:]) && bytes.Contains(req, []byte(m.Op)) }
				switch {
				case lost == "outcome" && mode == "lease":
					match = func(req []byte) bool { return bytes.Contains(req, []byte(receipt)) }
				case lost == "outcome":
					var armed atomic.Bool
					match = func(req []byte) bool {
						if bytes.Contains(req, []byte(receipt)) {
							armed.Store(true)
							return false
						}
						return armed.Load() && bytes.Contains(req, []byte("COMMIT"))
					}
				}
				proxy.DropNextReplyTo(match)
				var runs atomic.Int32
				fn := func(ctx context.Context) (string, error) {
					runs.Add(1)
					if tx, ok := mysqlstore.TxFrom(ctx); ok {
						if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, ?)", id, receipt); err != nil {
							return "", err
						}
					}
					return receipt, nil
				}
				v, err := call(t.Context(), ex, m, id, 5, fn)
				require.Equal(t, 1, proxy.Dropped())
				if lost == "outcome" {
					require.NoError(t, err, "the call succeeded and its outcome was stored: the caller is told so")
					assert.Equal(t, receipt, v)
				} else if err != nil {
					t.Logf("claim's reply lost: %v", err)
				}
				v, err = call(t.Context(), ex, m, id, 5, fn)
				// In transactional mode the lost claim's session holds the
				// key until the server has seen its connection close, which
				// it learns asynchronously: a retry meanwhile is answered
				// "in progress", as it should be. The client retries until
				// the server has ended that session (guard: a hang only).
				for guard := time.Now().Add(30 * time.Second); mode == "tx" && errors.Is(err, idem.ErrInProgress) && time.Now().Before(guard); {
					time.Sleep(10 * time.Millisecond)
					v, err = call(t.Context(), ex, m, id, 5, fn)
				}
				require.NoError(t, err, "the retry is not blocked by the lost claim")
				assert.Equal(t, receipt, v)
				if mode == "tx" {
					assert.Equal(t, 1, rows(t, db, ledger, id), "one committed business row")
				} else {
					assert.Equal(t, int32(1), runs.Load(), "the method ran once")
				}
			})
		}
	}
}
