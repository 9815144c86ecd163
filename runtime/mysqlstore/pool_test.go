package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// A call never needs a second connection of the pool while it holds one
// (issue 34, class 2): on pools of 1, 2 and 4 connections, in both modes,
// 64 goroutines over 8 keys of a fresh store (its statements not prepared
// yet) are each answered, the method of each key runs once, and a call
// that finds the pool in use is answered idem.ErrStoreBusy (and retried
// here), never held for the store's lock timeout.
func TestPoolStarvation(t *testing.T) {
	for _, pool := range []int{1, 2, 4} {
		for _, mode := range []string{"lease", "tx"} {
			t.Run(fmt.Sprintf("pool=%d/%s", pool, mode), func(t *testing.T) {
				db := newDB(t, pool)
				table := newTable(t, db)
				ledger := newLedger(t, db)
				var store idem.Store = mysqlstore.New(db, mysqlstore.WithTable(table))
				if mode == "tx" {
					store = mysqlstore.NewTx(db, mysqlstore.WithTable(table))
				}
				ex := idem.NewExecutor(store, idem.SingleTenant())
				m := &idem.Method{Op: "pool.Pay", TTL: time.Hour, Lease: time.Hour}
				const keys, callers = 8, 64
				var runs [keys]atomic.Int32
				ids := make([]string, keys)
				for k := range ids {
					ids[k] = "order-" + randHex(4)
				}
				var busy atomic.Int32
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						k := i % keys
						for {
							start := time.Now()
							v, err := call(t.Context(), ex, m, ids[k], 7, func(ctx context.Context) (string, error) {
								runs[k].Add(1)
								if tx, ok := mysqlstore.TxFrom(ctx); ok {
									if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, 'x')", ids[k]); err != nil {
										return "", err
									}
								}
								return "done-" + ids[k], nil
							})
							// A hang guard, far above any answer: the
							// defect held calls for the 5s lock timeout.
							if d := time.Since(start); d > 4*time.Second {
								t.Errorf("a call took %v to be answered", d)
							}
							if errors.Is(err, idem.ErrStoreBusy) || errors.Is(err, idem.ErrInProgress) {
								busy.Add(1)
								time.Sleep(2 * time.Millisecond)
								continue
							}
							if err != nil || v != "done-"+ids[k] {
								t.Errorf("answered (%q, %v)", v, err)
							}
							return
						}
					})
				}
				wg.Wait()
				for k := range keys {
					assert.Equal(t, int32(1), runs[k].Load(), "runs of key %d", k)
					if mode == "tx" {
						assert.Equal(t, 1, rows(t, db, ledger, ids[k]), "committed rows of key %d", k)
					}
				}
				t.Logf("%d answers busy or in progress, retried", busy.Load())
			})
		}
	}
}

// TestTakeoverPoolOfOne: a lease-mode takeover (a short READ COMMITTED
// transaction under the row's lock) on a pool of one connection, the
// store's statements not prepared yet: it used to wait for a second
// connection to prepare its statements, for the lock timeout, three times.
func TestTakeoverPoolOfOne(t *testing.T) {
	db := newDB(t, 1)
	table := newTable(t, db)
	ctx := t.Context()
	k, err := idem.NewKey("", "takeover.Pay", "k-"+randHex(4))
	require.NoError(t, err)
	req := idem.ClaimRequest{Key: k, Token: 1, Lease: time.Second, TTL: time.Hour}
	c, err := mysqlstore.New(db, mysqlstore.WithTable(table)).Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	timeTravel(t, db, table)(2 * time.Second) // the lease lapses
	s := mysqlstore.New(db, mysqlstore.WithTable(table), mysqlstore.WithLockTimeout(time.Minute))
	req.Token = 2
	start := time.Now()
	c, err = s.Claim(ctx, req)
	require.NoError(t, err)
	assert.True(t, c.Claimed)
	assert.True(t, c.TakenOver)
	assert.Less(t, time.Since(start), 30*time.Second, "the takeover waited for a second connection")
	require.NoError(t, s.Complete(ctx, k, 2, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}, time.Hour))
}

// TestLayeredHTTP is docs/LAYERS.md's wiring on MariaDB: an idemhttp edge
// and, in its handler, the business layer's idem.Do, both on one
// mysqlstore.NewTx over a pool of 4 connections; 8 concurrent requests of
// distinct keys. The inner call joins the edge's transaction
// (idem.NestingTxStore), so each request holds one connection: every
// request is served (or told the store is busy, 503, and served on its
// retry), each business write commits once, and the pool still serves an
// unrelated query after.
func TestLayeredHTTP(t *testing.T) {
	db := newDB(t, 4)
	table := newTable(t, db)
	ledger := newLedger(t, db)
	store := mysqlstore.NewTx(db, mysqlstore.WithTable(table))
	ex := idem.NewExecutor(store, idem.SingleTenant())
	inner := &idem.Method{Op: "orders.Place", TTL: time.Hour}
	var runs sync.Map // order → *atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		v, err := call(r.Context(), ex, inner, id, 1, func(ctx context.Context) (string, error) {
			n, _ := runs.LoadOrStore(id, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			tx, ok := mysqlstore.TxFrom(ctx)
			if !ok {
				return "", errors.New("no transaction")
			}
			// Slow enough that the 8 requests overlap on 4 connections.
			if _, err := tx.ExecContext(ctx, "DO SLEEP(0.05)"); err != nil {
				return "", err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, 'placed')", id)
			return "placed-" + id, err
		})
		if idemhttp.WriteError(w, err) {
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, v)
	})
	srv := httptest.NewServer(idemhttp.New(ex, idemhttp.SingleTenant())(mux))
	defer srv.Close()
	client := &http.Client{Timeout: 30 * time.Second} // a hang guard
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = "o-" + randHex(4)
		wg.Go(func() {
			for attempt := 0; ; attempt++ {
				req, err := http.NewRequest("POST", srv.URL+"/orders/"+ids[i], strings.NewReader("{}"))
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set("Idempotency-Key", "key-"+ids[i])
				resp, err := client.Do(req)
				if !assert.NoError(t, err, "request %d", i) {
					return
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusConflict {
					if attempt > 200 {
						t.Errorf("request %d: still %d after %d attempts: %s", i, resp.StatusCode, attempt, b)
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				assert.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, b)
				assert.Equal(t, "placed-"+ids[i], string(b))
				return
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		assert.Equal(t, 1, rows(t, db, ledger, id), "rows of %s", id)
		n, ok := runs.Load(id)
		if assert.True(t, ok) {
			assert.Equal(t, int32(1), n.(*atomic.Int32).Load(), "runs of %s", id)
		}
	}
	// Both layers' records committed: 16 final records.
	var final int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table+" WHERE status <> 1").Scan(&final))
	assert.Equal(t, 16, final)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var one int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT 1").Scan(&one), "the pool serves an unrelated query")
}

// TestBeginTx: inside a transactional call BeginTx is a savepoint of the
// call's transaction (a rolled-back unit's writes are gone, a committed
// unit's commit with the outcome); outside, a transaction of its own; with
// no database and no call, ErrNoClaimTx.
func TestBeginTx(t *testing.T) {
	db := newDB(t, 2)
	table := newTable(t, db)
	ledger := newLedger(t, db)
	ex := idem.NewExecutor(mysqlstore.NewTx(db, mysqlstore.WithTable(table)), idem.SingleTenant())
	m := &idem.Method{Op: "begin.Pay", TTL: time.Hour}
	id := "o-" + randHex(4)
	insert := "INSERT INTO " + ledger + " (order_id, v) VALUES (?, ?)"
	_, err := call(t.Context(), ex, m, id, 1, func(ctx context.Context) (string, error) {
		u, err := mysqlstore.BeginTx(ctx, db)
		if err != nil {
			return "", err
		}
		if _, err := u.ExecContext(ctx, insert, id, "rolled-back"); err != nil {
			return "", err
		}
		if err := u.Rollback(); err != nil {
			return "", err
		}
		u, err = mysqlstore.BeginTx(ctx, db)
		if err != nil {
			return "", err
		}
		defer func() { _ = u.Rollback() }()
		if _, err := u.ExecContext(ctx, insert, id, "kept"); err != nil {
			return "", err
		}
		return "ok", u.Commit()
	})
	require.NoError(t, err)
	var v string
	require.NoError(t, db.QueryRow("SELECT GROUP_CONCAT(v) FROM "+ledger+" WHERE order_id = ?", id).Scan(&v))
	assert.Equal(t, "kept", v)

	u, err := mysqlstore.BeginTx(t.Context(), db)
	require.NoError(t, err)
	_, err = u.ExecContext(t.Context(), insert, "outside", "x")
	require.NoError(t, err)
	require.NoError(t, u.Commit())
	assert.ErrorIs(t, u.Rollback(), sql.ErrTxDone)
	assert.Equal(t, 1, rows(t, db, ledger, "outside"))
	_, err = mysqlstore.BeginTx(t.Context(), nil)
	assert.ErrorIs(t, err, mysqlstore.ErrNoClaimTx)
}
