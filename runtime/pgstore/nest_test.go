package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// nestEnv stacks two layers on one transactional store: an outer Do (what
// idemhttp and idemgrpc run) whose method calls the generated wrapper of
// Ledger.Credit (the business layer).
type nestEnv struct {
	*txEnv
	pool *pgxpool.Pool
	ex   *idem.Executor
}

func newNestEnv(t *testing.T, conns int32) *nestEnv {
	return newNestEnvOn(t, newPool(t, conns, nil))
}

func newNestEnvOn(t *testing.T, pool *pgxpool.Pool, opts ...pgstore.Option) *nestEnv {
	table := newTable(t, pool)
	s := pgstore.NewTx(pool, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
	l := newLedger(t, pool)
	ex := idem.NewExecutor(s, idem.SingleTenant())
	return &nestEnv{txEnv: &txEnv{t: t, store: s, ledger: l, svc: NewIdempotentLedger(l, ex)}, pool: pool, ex: ex}
}

var edgeMethod = idem.Method{Op: "POST /credits", TTL: time.Minute, Wait: 5 * time.Second}

// edge runs fn under the outer layer's claim of key.
func (e *nestEnv) edge(ctx context.Context, key string, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("Idempotency-Key", key)
	var h idem.Hasher
	h.String(key)
	return idem.Do(ctx, e.ex, &edgeMethod, &k, &h, fn)
}

// edgeRecord returns the status of the outer layer's record of key, 0 when
// there is none.
func (e *nestEnv) edgeRecord(key string) idem.Status {
	e.t.Helper()
	k, err := idem.NewKey("", edgeMethod.Op, key)
	require.NoError(e.t, err)
	var st int16
	err = e.pool.QueryRow(context.Background(), "SELECT status FROM "+e.store.Table()+" WHERE key = $1", k.ID[:]).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(e.t, err)
	return idem.Status(st)
}

// TestNestedOneConnection: on a pool of ONE connection, an outer claim
// whose method calls the wrapper (which without nesting would need a
// second connection for a second transaction, and wait for it in vain)
// is served, with one acquisition of the pool; both records and the
// business row are committed, and a retry replays without running.
func TestNestedOneConnection(t *testing.T) {
	e := newNestEnv(t, 1)
	id := "one-" + randHex(4)
	runs := 0
	call := func() (string, error) {
		return e.edge(t.Context(), "k-"+id, func(ctx context.Context) (string, error) {
			runs++
			en, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 5})
			if err != nil {
				return "", err
			}
			return fmt.Sprint(en.Row), nil
		})
	}
	before := e.pool.Stat().AcquireCount()
	got, err := call()
	require.NoError(t, err)
	assert.Equal(t, int64(1), e.pool.Stat().AcquireCount()-before, "one connection for both layers")
	assert.Equal(t, idem.StatusSucceeded, e.edgeRecord("k-"+id))
	assert.Equal(t, idem.StatusSucceeded, e.record(id))
	assert.Len(t, e.ledger.rows(t)[id], 1)

	again, err := call()
	require.NoError(t, err)
	assert.Equal(t, got, again)
	assert.Equal(t, 1, runs, "the retry is replayed by the outer layer")
	assert.Len(t, e.ledger.rows(t)[id], 1)
}

// TestNestedFaultBetweenRecords: whatever ends the outer call without
// committing after the inner call stored its outcome (a transient error of
// the outer method, its panic, the connection lost before the commit)
// leaves neither record nor the business row; the retry then runs both
// layers again and commits exactly one row.
func TestNestedFaultBetweenRecords(t *testing.T) {
	faults := []struct {
		name  string
		fault func(t *testing.T, ctx context.Context) error
		panic bool
	}{
		{name: "transient error", fault: func(*testing.T, context.Context) error { return errors.New("render failed") }},
		{name: "panic", panic: true},
		{name: "connection lost before the commit", fault: func(t *testing.T, ctx context.Context) error {
			tx, ok := pgstore.TxFrom(ctx)
			require.True(t, ok)
			var pid int32
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
			killer := newPool(t, 1, nil)
			_, err := killer.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid)
			require.NoError(t, err)
			return nil // the method succeeds; the commit cannot
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			e := newNestEnv(t, 2)
			id := "fault-" + randHex(4)
			key := "k-" + id
			faulty := true
			call := func() (string, error) {
				return e.edge(t.Context(), key, func(ctx context.Context) (string, error) {
					en, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 7})
					if err != nil {
						return "", err
					}
					// Here the inner record is written (not committed).
					if faulty {
						faulty = false
						if f.panic {
							panic("between the records")
						}
						if err := f.fault(t, ctx); err != nil {
							return "", err
						}
					}
					return fmt.Sprint(en.Row), nil
				})
			}
			func() {
				defer func() {
					if r := recover(); r != nil && !f.panic {
						panic(r)
					}
				}()
				_, err := call()
				require.Error(t, err)
			}()
			assert.Zero(t, e.edgeRecord(key), "no outer record")
			assert.Zero(t, e.record(id), "no inner record")
			assert.Empty(t, e.ledger.rows(t)[id], "no business row")

			_, err := call()
			require.NoError(t, err)
			assert.Equal(t, idem.StatusSucceeded, e.edgeRecord(key))
			assert.Equal(t, idem.StatusSucceeded, e.record(id))
			assert.Len(t, e.ledger.rows(t)[id], 1)
		})
	}
}

// TestNestedInnerOutcomes: what the inner layer stores, in the outer
// layer's transaction, for each kind of result, and that the outer
// transaction goes on after it (the outer method writes a row of its own
// after the inner call, which must commit).
func TestNestedInnerOutcomes(t *testing.T) {
	cases := []struct {
		name      string
		amount    int64
		hookErr   error
		wantErr   error // of the inner call
		wantInner idem.Status
		wantRows  int
	}{
		{name: "success", amount: 5, wantInner: idem.StatusSucceeded, wantRows: 1},
		{name: "final error: record kept, write discarded", amount: 5000, wantErr: ErrLimit, wantInner: idem.StatusFailedFinal},
		{name: "transient error: no record, write discarded", amount: 5, hookErr: errTransient, wantErr: errTransient},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newNestEnv(t, 1)
			if c.hookErr != nil {
				e.ledger.hook = func(context.Context, pgx.Tx) error { return c.hookErr }
			}
			id := "out-" + randHex(4)
			key := "k-" + id
			_, err := e.edge(t.Context(), key, func(ctx context.Context) (string, error) {
				_, ierr := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: c.amount})
				if c.wantErr == nil {
					require.NoError(t, ierr)
				} else {
					require.ErrorIs(t, ierr, c.wantErr)
				}
				tx, ok := pgstore.TxFrom(ctx)
				require.True(t, ok)
				_, err := tx.Exec(ctx, "INSERT INTO "+e.ledger.table+" (id, amount) VALUES ($1, 0)", "edge-"+id)
				return "", err
			})
			require.NoError(t, err)
			assert.Equal(t, idem.StatusSucceeded, e.edgeRecord(key))
			assert.Equal(t, c.wantInner, e.record(id))
			rows := e.ledger.rows(t)
			assert.Len(t, rows[id], c.wantRows)
			assert.Len(t, rows["edge-"+id], 1, "the outer method's own write commits")
		})
	}
}

var errTransient = errors.New("ledger: connection reset (transient)")

// TestNestedSameIntentTwoKeys: two outer keys for one business intent (the
// inner key): the second call's inner layer replays the first's outcome,
// also when the first still holds the inner key in its open transaction
// (the second waits on the inner key's lock, inflight=wait:5s, and gets
// the committed outcome); another payload under the inner key is
// ErrPayloadMismatch, and the second outer transaction goes on after it.
func TestNestedSameIntentTwoKeys(t *testing.T) {
	e := newNestEnv(t, 2)
	id := "intent-" + randHex(4)
	claimed := make(chan struct{})
	finish := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := e.edge(t.Context(), "first-"+id, func(ctx context.Context) (string, error) {
			_, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 3})
			close(claimed)
			<-finish
			return "first", err
		})
		assert.NoError(t, err)
	})
	<-claimed
	var second Entry
	wg.Go(func() {
		_, err := e.edge(t.Context(), "second-"+id, func(ctx context.Context) (string, error) {
			var err error
			second, err = e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 3})
			return "second", err
		})
		assert.NoError(t, err)
	})
	close(finish)
	wg.Wait()
	rows := e.ledger.rows(t)[id]
	require.Len(t, rows, 1, "one business row for one intent")
	assert.Equal(t, rows[0], second, "the second key's inner call replays the first's outcome")

	_, err := e.edge(t.Context(), "third-"+id, func(ctx context.Context) (string, error) {
		_, ierr := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 4})
		require.ErrorIs(t, ierr, idem.ErrPayloadMismatch)
		tx, _ := pgstore.TxFrom(ctx)
		_, err := tx.Exec(ctx, "INSERT INTO "+e.ledger.table+" (id, amount) VALUES ($1, 0)", "third-"+id)
		return "", err
	})
	require.NoError(t, err)
	assert.Len(t, e.ledger.rows(t)["third-"+id], 1, "the outer transaction goes on after the inner refusal")
}

// TestNestedHeldKey: an inner call whose key another transaction holds
// gets ErrInProgress for the same payload and ErrPayloadMismatch for
// another, whether it does not wait (Wait 0) or waits in vain; the outer
// transaction goes on, and no statement fails on the server (a failed
// statement would abort the outer transaction, or need a savepoint to
// survive, and fills the server's log: issue 21's footprint).
func TestNestedHeldKey(t *testing.T) {
	pool, tr := tracedPool(t, 2)
	e := newNestEnvOn(t, pool)
	id := "held-" + randHex(4)
	claimed := make(chan struct{})
	finish := make(chan struct{})
	var wg sync.WaitGroup
	release := sync.OnceFunc(func() { close(finish) })
	defer wg.Wait()
	defer release() // also when an assertion below stops the test
	wg.Go(func() {
		_, err := e.edge(t.Context(), "holder-"+id, func(ctx context.Context) (string, error) {
			_, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 3})
			close(claimed)
			<-finish
			return "", err
		})
		assert.NoError(t, err)
	})
	<-claimed
	for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
		m := idemLedgerCredit
		m.Wait = wait
		for _, c := range []struct {
			amount int64
			want   error
		}{{3, idem.ErrInProgress}, {4, idem.ErrPayloadMismatch}} {
			key := fmt.Sprintf("dup-%d-%v-%s", c.amount, wait, id)
			_, err := e.edge(t.Context(), key, func(ctx context.Context) (string, error) {
				_, ierr := e.svc.credit(ctx, &m, CreditRequest{ID: id, Amount: c.amount})
				assert.ErrorIs(t, ierr, c.want, "wait %v", wait)
				tx, _ := pgstore.TxFrom(ctx)
				_, err := tx.Exec(ctx, "INSERT INTO "+e.ledger.table+" (id, amount) VALUES ($1, 0)", key)
				return "", err
			})
			require.NoError(t, err)
			assert.Len(t, e.ledger.rows(t)[key], 1, "the outer transaction goes on after the inner refusal")
		}
	}
	release()
	wg.Wait()
	assert.Len(t, e.ledger.rows(t)[id], 1)
	assert.Empty(t, tr.failed(), "statements that failed on the server")
}

// TestNestedThreeLevels: edge -> wrapper -> wrapper (a wrapped method that
// calls another) on one connection; a final error of the innermost keeps
// its record and discards only its own write.
func TestNestedThreeLevels(t *testing.T) {
	e := newNestEnv(t, 1)
	mid := idemLedgerCredit
	mid.Op = "Ledger.Batch"
	id2 := "three2-" + randHex(4)
	var innerErr error
	e.ledger.hook = func(ctx context.Context, _ pgx.Tx) error {
		e.ledger.hook = nil // only the middle call runs the innermost
		_, innerErr = e.svc.Credit(ctx, CreditRequest{ID: id2 + "-inner", Amount: 5000})
		return nil
	}
	_, err := e.edge(t.Context(), "k-"+id2, func(ctx context.Context) (string, error) {
		_, err := e.svc.credit(ctx, &mid, CreditRequest{ID: id2 + "-mid", Amount: 1})
		return "", err
	})
	require.NoError(t, err)
	require.ErrorIs(t, innerErr, ErrLimit)
	rows := e.ledger.rows(t)
	assert.Len(t, rows[id2+"-mid"], 1)
	assert.Empty(t, rows[id2+"-inner"], "the innermost final error discarded its write")
	assert.Equal(t, idem.StatusFailedFinal, e.record(id2+"-inner"))
	assert.Equal(t, idem.StatusSucceeded, e.edgeRecord("k-"+id2))
}

// TestNestedConcurrentPool: N concurrent requests through both layers on
// a pool of N connections are all served: each takes one connection, once.
func TestNestedConcurrentPool(t *testing.T) {
	const n = 8
	e := newNestEnv(t, n)
	before := e.pool.Stat().AcquireCount()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("conc-%d-%s", i, randHex(3))
			_, errs[i] = e.edge(t.Context(), "k-"+id, func(ctx context.Context) (string, error) {
				_, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 1})
				return id, err
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(n), e.pool.Stat().AcquireCount()-before, "one acquisition per request")
	assert.Len(t, e.ledger.rows(t), n)
}

// TestBeginTx: inside a claim, BeginTx is a savepoint of the claim's
// transaction (its Rollback undoes its writes alone, its Commit keeps them
// for the call's commit); outside, a transaction of its own on the pool,
// or ErrNoClaimTx without one.
func TestBeginTx(t *testing.T) {
	e := newNestEnv(t, 2)
	id := "begin-" + randHex(4)
	ins := func(ctx context.Context, tx pgx.Tx, suffix string) {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.ledger.table+" (id, amount) VALUES ($1, 1)", id+suffix)
		require.NoError(t, err)
	}
	_, err := e.edge(t.Context(), "k-"+id, func(ctx context.Context) (string, error) {
		undone, err := pgstore.BeginTx(ctx, e.pool)
		require.NoError(t, err)
		ins(ctx, undone, "-undone")
		require.NoError(t, undone.Rollback(ctx))
		kept, err := pgstore.BeginTx(ctx, e.pool)
		require.NoError(t, err)
		ins(ctx, kept, "-kept")
		require.NoError(t, kept.Commit(ctx))
		return "", errors.New("transient: the call rolls back, savepoint and all")
	})
	require.Error(t, err)
	assert.Empty(t, e.ledger.rows(t)[id+"-kept"], "a committed savepoint commits only with the call")

	tx, err := pgstore.BeginTx(t.Context(), e.pool)
	require.NoError(t, err)
	ins(t.Context(), tx, "-own")
	require.NoError(t, tx.Commit(t.Context()))
	assert.Len(t, e.ledger.rows(t)[id+"-own"], 1)

	_, err = pgstore.BeginTx(t.Context(), nil)
	require.ErrorIs(t, err, pgstore.ErrNoClaimTx)
}

// TestNestedHeldKeyNoWaitLockTimeout: with WithLockTimeout set (an hour
// here), an inner call that does not wait (Method.Wait 0: "ErrInProgress at
// once") is still told at once that another transaction holds its key; it
// used to poll for the whole lock timeout, holding the outer call's
// transaction and its request. A claim that waits hits the hang guard.
func TestNestedHeldKeyNoWaitLockTimeout(t *testing.T) {
	e := newNestEnvOn(t, newPool(t, 2, nil), pgstore.WithLockTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // hang guard
	defer cancel()
	id := "held-nowait-" + randHex(4)
	claimed, finish := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	release := sync.OnceFunc(func() { close(finish) })
	defer wg.Wait()
	defer release() // also when an assertion below stops the test
	wg.Go(func() {
		_, err := e.edge(ctx, "holder-"+id, func(ctx context.Context) (string, error) {
			_, err := e.svc.Credit(ctx, CreditRequest{ID: id, Amount: 3})
			close(claimed)
			<-finish
			return "", err
		})
		assert.NoError(t, err)
	})
	<-claimed
	m := idemLedgerCredit
	m.Wait = 0
	for _, c := range []struct {
		amount int64
		want   error
	}{{3, idem.ErrInProgress}, {4, idem.ErrPayloadMismatch}} {
		_, err := e.edge(ctx, fmt.Sprintf("dup-%d-%s", c.amount, id), func(ctx context.Context) (string, error) {
			_, ierr := e.svc.credit(ctx, &m, CreditRequest{ID: id, Amount: c.amount})
			if !errors.Is(ierr, c.want) {
				return "", fmt.Errorf("amount %d: %w, want %w", c.amount, ierr, c.want)
			}
			return "edge-ok", nil
		})
		require.NoError(t, err)
	}
}
