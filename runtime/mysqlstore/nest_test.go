package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// nestEnv is an edge layer (idem.Do of a request key) over a business
// layer (idem.Do of an order), both on one mysqlstore.NewTx.
type nestEnv struct {
	t      *testing.T
	db     *sql.DB
	table  string
	ledger string
	store  *mysqlstore.TxStore
	ex     *idem.Executor
}

func newNestEnv(t *testing.T, conns int) *nestEnv {
	db := newDB(t, conns)
	e := &nestEnv{t: t, db: db, table: newTable(t, db), ledger: newLedger(t, db)}
	e.store = mysqlstore.NewTx(db, mysqlstore.WithTable(e.table))
	e.ex = idem.NewExecutor(e.store, idem.SingleTenant())
	return e
}

var (
	nestEdge  = &idem.Method{Op: "POST /orders", TTL: time.Hour}
	nestInner = &idem.Method{Op: "orders.Place", TTL: time.Hour, Wait: 200 * time.Millisecond}
	nestDeep  = &idem.Method{Op: "ledger.Credit", TTL: time.Hour}
)

// write inserts a ledger row of order through the call's transaction.
func (e *nestEnv) write(ctx context.Context, order string) error {
	tx, ok := mysqlstore.TxFrom(ctx)
	if !ok {
		return errors.New("no transaction")
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO "+e.ledger+" (order_id, v) VALUES (?, 'x')", order)
	return err
}

func (e *nestEnv) records() (final, processing int) {
	e.t.Helper()
	require.NoError(e.t, e.db.QueryRow("SELECT COALESCE(SUM(status <> 1), 0), COALESCE(SUM(status = 1), 0) FROM "+e.table).Scan(&final, &processing))
	return final, processing
}

// TestNestedThreeLevels: an edge, a wrapped method and a method it calls,
// on a pool of one connection: one transaction holds all three records
// and the three writes; replays of each level run nothing.
func TestNestedThreeLevels(t *testing.T) {
	e := newNestEnv(t, 1)
	ctx := t.Context()
	id := "o-" + randHex(4)
	runs := 0
	place := func(ctx context.Context) (string, error) {
		return call(ctx, e.ex, nestInner, id, 1, func(ctx context.Context) (string, error) {
			runs++
			if err := e.write(ctx, id+"/inner"); err != nil {
				return "", err
			}
			return call(ctx, e.ex, nestDeep, id, 1, func(ctx context.Context) (string, error) {
				runs++
				return "credited", e.write(ctx, id+"/deep")
			})
		})
	}
	v, err := call(ctx, e.ex, nestEdge, "req-"+id, 1, func(ctx context.Context) (string, error) {
		runs++
		if err := e.write(ctx, id+"/edge"); err != nil {
			return "", err
		}
		return place(ctx)
	})
	require.NoError(t, err)
	assert.Equal(t, "credited", v)
	assert.Equal(t, 3, runs)
	final, processing := e.records()
	assert.Equal(t, 3, final)
	assert.Equal(t, 0, processing)
	for _, o := range []string{"/edge", "/inner", "/deep"} {
		assert.Equal(t, 1, rows(t, e.db, e.ledger, id+o), o)
	}
	v, err = place(ctx) // the business layer alone, as a retry without the edge
	require.NoError(t, err)
	assert.Equal(t, "credited", v)
	assert.Equal(t, 3, runs)
}

// TestNestedInnerOutcomes: what the edge's transaction keeps of a nested
// call. A nested final error's record is kept even when the edge discards
// its own writes (a final error of its own): a retry of the business layer
// replays it. A nested transient error leaves nothing: its key is free.
func TestNestedInnerOutcomes(t *testing.T) {
	e := newNestEnv(t, 2)
	ctx := t.Context()
	errDeclined := errors.New("declined")
	id := "o-" + randHex(4)
	_, err := call(ctx, e.ex, nestEdge, "req-"+id, 1, func(ctx context.Context) (string, error) {
		if err := e.write(ctx, id+"/edge"); err != nil {
			return "", err
		}
		_, err := call(ctx, e.ex, nestInner, id, 1, func(ctx context.Context) (string, error) {
			return "", idem.Final(errDeclined)
		})
		return "", err // final: the edge discards its writes
	})
	require.ErrorIs(t, err, errDeclined)
	assert.Equal(t, 0, rows(t, e.db, e.ledger, id+"/edge"))
	_, err = call(ctx, e.ex, nestInner, id, 1, func(context.Context) (string, error) { return "must not run", nil })
	assert.ErrorIs(t, err, idem.ErrFinal, "the nested final error was kept")

	id2 := "o-" + randHex(4)
	errBusy := errors.New("try later")
	_, err = call(ctx, e.ex, nestEdge, "req-"+id2, 1, func(ctx context.Context) (string, error) {
		_, err := call(ctx, e.ex, nestInner, id2, 1, func(ctx context.Context) (string, error) {
			if err := e.write(ctx, id2+"/inner"); err != nil {
				return "", err
			}
			return "", errBusy // transient: rolled back to the savepoint
		})
		if !errors.Is(err, errBusy) {
			return "", err
		}
		return "edge-ok", e.write(ctx, id2+"/edge")
	})
	require.NoError(t, err)
	assert.Equal(t, 0, rows(t, e.db, e.ledger, id2+"/inner"))
	assert.Equal(t, 1, rows(t, e.db, e.ledger, id2+"/edge"))
	v, err := call(ctx, e.ex, nestInner, id2, 1, func(context.Context) (string, error) { return "ran", nil })
	require.NoError(t, err)
	assert.Equal(t, "ran", v, "the transient error's key was free")
}

// TestNestedHeldKey: a nested call whose key another transaction holds is
// told the call is in progress after its wait, and the edge's transaction
// stays usable: its own write commits.
func TestNestedHeldKey(t *testing.T) {
	e := newNestEnv(t, 2)
	ctx := t.Context()
	id := "o-" + randHex(4)
	// Hold the business key as a running call of the same payload would:
	// claim it through the executor, and keep its method running.
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, e.ex, nestInner, id, 1, func(context.Context) (string, error) {
			close(held)
			<-release
			return "first", nil
		})
		done <- err
	}()
	<-held
	v, err := call(ctx, e.ex, nestEdge, "req-"+id, 1, func(ctx context.Context) (string, error) {
		_, err := call(ctx, e.ex, nestInner, id, 1, func(context.Context) (string, error) { return "second", nil })
		if !errors.Is(err, idem.ErrInProgress) {
			return "", err
		}
		return "edge-ok", e.write(ctx, id+"/edge")
	})
	require.NoError(t, err)
	assert.Equal(t, "edge-ok", v)
	assert.Equal(t, 1, rows(t, e.db, e.ledger, id+"/edge"))
	close(release)
	require.NoError(t, <-done)
	v, err = call(ctx, e.ex, nestInner, id, 1, func(context.Context) (string, error) { return "must not run", nil })
	require.NoError(t, err)
	assert.Equal(t, "first", v)
}

// TestNestedHeldKeyNoWait: a nested call whose method does not wait
// (Method.Wait 0: "ErrInProgress at once") is told so at once when another
// transaction holds its key, whatever the store's lock timeout; it used to
// poll for the whole lock timeout (5s by default), holding the enclosing
// call's transaction, connection and locks, and its HTTP request, that
// long. The store's lock timeout is an hour here: a nested claim that
// waits for it hits the test's hang guard instead.
func TestNestedHeldKeyNoWait(t *testing.T) {
	e := newNestEnv(t, 2)
	e.store = mysqlstore.NewTx(e.db, mysqlstore.WithTable(e.table), mysqlstore.WithLockTimeout(time.Hour))
	e.ex = idem.NewExecutor(e.store, idem.SingleTenant())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard
	defer cancel()
	id := "o-" + randHex(4)
	noWait := *nestInner
	noWait.Wait = 0
	held, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	release := sync.OnceFunc(func() { close(finish) })
	defer func() { release(); <-done }() // also when an assertion below stops the test
	go func() {
		_, err := call(ctx, e.ex, &noWait, id, 1, func(context.Context) (string, error) {
			close(held)
			<-finish
			return "first", nil
		})
		done <- err
	}()
	<-held
	for _, amount := range []int64{1, 2} {
		v, err := call(ctx, e.ex, nestEdge, "req-"+id+"-"+strconv.FormatInt(amount, 10), amount, func(ctx context.Context) (string, error) {
			_, err := call(ctx, e.ex, &noWait, id, amount, func(context.Context) (string, error) { return "second", nil })
			want := idem.ErrInProgress
			if amount != 1 {
				want = idem.ErrPayloadMismatch
			}
			if !errors.Is(err, want) {
				return "", fmt.Errorf("amount %d: %w, want %w", amount, err, want)
			}
			return "edge-ok", nil
		})
		require.NoError(t, err)
		assert.Equal(t, "edge-ok", v)
	}
	release()
}
