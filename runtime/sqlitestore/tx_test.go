package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

const ordersSchema = `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)`

func withOrders(t testing.TB, db *sql.DB) {
	t.Helper()
	_, err := db.Exec(ordersSchema)
	require.NoError(t, err)
}

func orders(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n))
	return n
}

var errDeclined = errors.New("card declined")

var placeMethod = idem.Method{Op: "orders.Place", TTL: time.Hour, Lease: time.Minute,
	Final: []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}}

// place is what a generated wrapper does: it builds the key and the
// fingerprint and calls idem.Do, with the method writing its row through
// the call's transaction when there is one.
func place(ctx context.Context, ex *idem.Executor, m *idem.Method, id string, amount int64, fn func(ctx context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.Int(amount)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

// insertOrder writes the business row through the call's transaction
// (transactional mode) or through db (lease mode).
func insertOrder(ctx context.Context, db *sql.DB, id string, amount int64) error {
	const q = `INSERT INTO orders (id, amount) VALUES (?, ?)`
	if tx, ok := sqlitestore.TxFrom(ctx); ok {
		_, err := tx.ExecContext(ctx, q, id, amount)
		return err
	}
	_, err := db.ExecContext(ctx, q, id, amount)
	return err
}

// TestExactlyOnceConcurrent: many goroutines call the wrapped method with
// one key at once, in both modes; the method runs once, writes one row, and
// every caller gets its result.
func TestExactlyOnceConcurrent(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			db, _ := openDB(t)
			withOrders(t, db)
			var store idem.Store = sqlitestore.New(db)
			if mode == "tx" {
				store = sqlitestore.NewTx(db)
			}
			ex := idem.NewExecutor(store, idem.SingleTenant())
			m := placeMethod
			m.Wait = time.Minute
			const n = 48
			var runs atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			results, errs := make([]string, n), make([]error, n)
			for i := range n {
				wg.Go(func() {
					<-start
					results[i], errs[i] = place(t.Context(), ex, &m, "order-1", 100, func(ctx context.Context) (string, error) {
						runs.Add(1)
						if err := insertOrder(ctx, db, "order-1", 100); err != nil {
							return "", err
						}
						time.Sleep(5 * time.Millisecond)
						return "receipt-1", nil
					})
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, int32(1), runs.Load(), "the method runs exactly once")
			assert.Equal(t, 1, orders(t, db), "one business row")
			for i := range n {
				if assert.NoError(t, errs[i], "caller %d", i) {
					assert.Equal(t, "receipt-1", results[i], "caller %d", i)
				}
			}
		})
	}
}

// TestTxWrites: in transactional mode a success commits the method's rows
// with the outcome, a final error commits only the FAILED_FINAL record, a
// transient error or a panic commits nothing, and the transaction is
// unusable once the call is over.
func TestTxWrites(t *testing.T) {
	db, _ := openDB(t)
	withOrders(t, db)
	ex := idem.NewExecutor(sqlitestore.NewTx(db), idem.SingleTenant())
	ctx := t.Context()

	var kept *sqlitestore.Tx
	v, err := place(ctx, ex, &placeMethod, "ok", 1, func(ctx context.Context) (string, error) {
		kept, _ = sqlitestore.TxFrom(ctx)
		return "r-ok", insertOrder(ctx, db, "ok", 1)
	})
	require.NoError(t, err)
	assert.Equal(t, "r-ok", v)
	assert.Equal(t, 1, orders(t, db))
	_, err = kept.ExecContext(ctx, `INSERT INTO orders VALUES ('late', 1)`)
	assert.ErrorIs(t, err, sqlitestore.ErrTxOver, "the transaction is over with the call")

	runs := 0
	declined := func(ctx context.Context) (string, error) {
		runs++
		if err := insertOrder(ctx, db, "declined", 2); err != nil {
			return "", err
		}
		return "", fmt.Errorf("pay: %w", errDeclined)
	}
	_, err = place(ctx, ex, &placeMethod, "declined", 2, declined)
	require.ErrorIs(t, err, errDeclined)
	_, err = place(ctx, ex, &placeMethod, "declined", 2, declined)
	assert.ErrorIs(t, err, errDeclined, "the final error is replayed")
	assert.Equal(t, 1, runs)
	assert.Equal(t, 1, orders(t, db), "a final error discards the method's writes")

	_, err = place(ctx, ex, &placeMethod, "flaky", 3, func(ctx context.Context) (string, error) {
		if err := insertOrder(ctx, db, "flaky", 3); err != nil {
			return "", err
		}
		return "", errors.New("connection reset")
	})
	require.Error(t, err)
	assert.Equal(t, 1, orders(t, db), "a transient error rolls everything back")
	func() {
		defer func() { assert.NotNil(t, recover()) }()
		_, _ = place(ctx, ex, &placeMethod, "flaky", 3, func(ctx context.Context) (string, error) {
			_ = insertOrder(ctx, db, "flaky", 3)
			panic("boom")
		})
	}()
	assert.Equal(t, 1, orders(t, db), "a panic rolls everything back")
	v, err = place(ctx, ex, &placeMethod, "flaky", 3, func(ctx context.Context) (string, error) {
		return "r-flaky", insertOrder(ctx, db, "flaky", 3)
	})
	require.NoError(t, err, "the key was released")
	assert.Equal(t, "r-flaky", v)
	assert.Equal(t, 2, orders(t, db))
}

// TestTxDuplicateAnswersByPolicy: while a call of this process holds a key
// in its transaction, a duplicate answers by its inflight policy within its
// wait (in progress, or a payload mismatch for another payload), without
// queueing on the write lock, and replays once the holder committed.
func TestTxDuplicateAnswersByPolicy(t *testing.T) {
	db, _ := openDB(t)
	withOrders(t, db)
	ex := idem.NewExecutor(sqlitestore.NewTx(db), idem.SingleTenant())
	ctx := t.Context()
	running, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := place(ctx, ex, &placeMethod, "held", 1, func(ctx context.Context) (string, error) {
			close(running)
			<-finish
			return "first", insertOrder(ctx, db, "held", 1)
		})
		done <- err
	}()
	<-running
	dup := func(m idem.Method, amount int64) error {
		_, err := place(ctx, ex, &m, "held", amount, func(context.Context) (string, error) {
			t.Error("a duplicate must not run while the key is held")
			return "", nil
		})
		return err
	}
	assert.ErrorIs(t, dup(placeMethod, 1), idem.ErrInProgress, "reject policy")
	assert.ErrorIs(t, dup(placeMethod, 2), idem.ErrPayloadMismatch, "another payload")
	waiting := placeMethod
	waiting.Wait = 50 * time.Millisecond
	assert.ErrorIs(t, dup(waiting, 1), idem.ErrInProgress, "a wait that runs out")

	waiting.Wait = time.Minute
	replay := make(chan string, 1)
	go func() {
		v, err := place(ctx, ex, &waiting, "held", 1, func(context.Context) (string, error) { return "second", nil })
		assert.NoError(t, err)
		replay <- v
	}()
	close(finish)
	require.NoError(t, <-done)
	assert.Equal(t, "first", <-replay, "a waiting duplicate replays the committed outcome")
}

// TestTxOtherProcessBounded: a duplicate in another process (here another
// store on its own connections to the same file) cannot see the open
// transaction; it waits for SQLite's write lock for the connection's
// busy_timeout and then fails with idem.ErrStoreFull, never hanging; when
// the holder commits within that time, it replays.
func TestTxOtherProcessBounded(t *testing.T) {
	db, path := openDB(t)
	withOrders(t, db)
	ex := idem.NewExecutor(sqlitestore.NewTx(db), idem.SingleTenant())
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(300)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	otherEx := idem.NewExecutor(sqlitestore.NewTx(other, sqlitestore.WithLockTimeout(300*time.Millisecond)), idem.SingleTenant())
	ctx := t.Context()

	hold := func(id string) (chan struct{}, chan error) {
		running, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := place(ctx, ex, &placeMethod, id, 1, func(ctx context.Context) (string, error) {
				close(running)
				<-finish
				return "first", insertOrder(ctx, db, id, 1)
			})
			done <- err
		}()
		<-running
		return finish, done
	}
	finish, done := hold("a")
	start := time.Now()
	_, err = place(ctx, otherEx, &placeMethod, "a", 1, func(context.Context) (string, error) { return "dup", nil })
	assert.ErrorIs(t, err, idem.ErrStoreFull, "the write lock stays busy beyond busy_timeout")
	assert.Less(t, time.Since(start), 30*time.Second, "bounded by busy_timeout")
	close(finish)
	require.NoError(t, <-done)
	v, err := place(ctx, otherEx, &placeMethod, "a", 1, func(context.Context) (string, error) { return "dup", nil })
	require.NoError(t, err)
	assert.Equal(t, "first", v, "the committed outcome is replayed in the other process")
}

// TestTxNestedCallRefused: an idempotent call from inside a method that
// would take the write lock its own caller holds (an executor on the
// TxStore's lease-mode Store) fails at once instead of waiting for it; the
// TxStore's own executor joins the caller's transaction instead
// (TestNestedInDoor).
func TestTxNestedCallRefused(t *testing.T) {
	db, _ := openDB(t)
	ts := sqlitestore.NewTx(db)
	ex := idem.NewExecutor(ts, idem.SingleTenant())
	lease := idem.NewExecutor(ts.Store, idem.SingleTenant())
	var inner error
	_, err := place(t.Context(), ex, &placeMethod, "outer", 1, func(ctx context.Context) (string, error) {
		_, inner = place(ctx, lease, &placeMethod, "inner", 1, func(context.Context) (string, error) { return "x", nil })
		return "outer", nil
	})
	require.NoError(t, err)
	require.Error(t, inner)
	assert.Contains(t, inner.Error(), "inside a transactional call of the same store")
}

// TestProcessesShareOneFile: stores on separate handles of one file (as
// separate processes have: their own connections, no shared write slot)
// race on the same keys through idem.Do; every key runs once, and every
// caller gets its result, the handles meeting only in SQLite's file locks.
// (Use one mode per file: a transactional call answers a lease-mode
// PROCESSING record as in progress at once.)
func TestProcessesShareOneFile(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) { processesShareOneFile(t, mode) })
	}
}

func processesShareOneFile(t *testing.T, mode string) {
	db, path := openDB(t)
	withOrders(t, db)
	const handles, perHandle, keys = 4, 6, 5
	var runs [keys]atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range handles {
		hdb, err := sqlitestore.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = hdb.Close() })
		var store idem.Store = sqlitestore.New(hdb)
		if mode == "tx" {
			store = sqlitestore.NewTx(hdb)
		}
		ex := idem.NewExecutor(store, idem.SingleTenant())
		m := placeMethod
		m.Wait = time.Minute
		for range perHandle {
			wg.Go(func() {
				<-start
				for k := range keys {
					id := fmt.Sprint("order-", k)
					v, err := place(t.Context(), ex, &m, id, 1, func(ctx context.Context) (string, error) {
						runs[k].Add(1)
						return "r-" + id, insertOrder(ctx, hdb, id, 1)
					})
					if assert.NoError(t, err) {
						assert.Equal(t, "r-"+id, v)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		assert.Equal(t, int32(1), runs[k].Load(), "key %d runs once", k)
	}
	assert.Equal(t, keys, orders(t, db))
}

// TestWriteLockTimeout: while a transactional call holds the write lock, a
// call on another key of the same store waits at most the lock timeout and
// then fails with idem.ErrStoreFull, the method not run; a canceled caller
// stops waiting at once.
func TestWriteLockTimeout(t *testing.T) {
	db, _ := openDB(t)
	ex := idem.NewExecutor(sqlitestore.NewTx(db, sqlitestore.WithLockTimeout(100*time.Millisecond)), idem.SingleTenant())
	ctx := t.Context()
	running, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := place(ctx, ex, &placeMethod, "holder", 1, func(context.Context) (string, error) {
			close(running)
			<-finish
			return "h", nil
		})
		done <- err
	}()
	<-running
	other := func(ctx context.Context) error {
		_, err := place(ctx, ex, &placeMethod, "other", 1, func(context.Context) (string, error) {
			t.Error("the method must not run without the lock")
			return "", nil
		})
		return err
	}
	start := time.Now()
	err := other(ctx)
	assert.ErrorIs(t, err, idem.ErrStoreFull)
	assert.Less(t, time.Since(start), 30*time.Second)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, other(canceled), context.Canceled)
	close(finish)
	require.NoError(t, <-done)
	v, err := place(ctx, ex, &placeMethod, "other", 1, func(context.Context) (string, error) { return "o", nil })
	require.NoError(t, err)
	assert.Equal(t, "o", v)
}

// TestOpenRefusesNonFiles: Open takes a file name only.
func TestOpenRefusesNonFiles(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro", "x#y"} {
		_, err := sqlitestore.Open(p)
		assert.Error(t, err, "%q", p)
	}
}
