package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

type txEnv struct {
	t      *testing.T
	store  *pgstore.TxStore
	ledger *Ledger
	svc    *IdempotentLedger
}

func newTxEnv(t *testing.T, conns int32) *txEnv {
	pool := newPool(t, conns, nil)
	table := newTable(t, pool)
	s := pgstore.NewTx(pool, pgstore.WithTable(table))
	l := newLedger(t, pool)
	return &txEnv{t: t, store: s, ledger: l, svc: NewIdempotentLedger(l, idem.NewExecutor(s, idem.SingleTenant()))}
}

// record returns the status of the key's record, 0 when there is none.
func (e *txEnv) record(id string) idem.Status {
	e.t.Helper()
	k, err := idem.NewKey("", idemLedgerCredit.Op, id)
	require.NoError(e.t, err)
	var st int16
	err = e.store.Pool().QueryRow(context.Background(),
		"SELECT status FROM "+e.store.Table()+" WHERE key = $1", k.ID[:]).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(e.t, err)
	return idem.Status(st)
}

// TestTxFinalDiscardsWrites: a final error rolls the business write back to
// the savepoint and commits the FAILED_FINAL record, which is replayed.
func TestTxFinalDiscardsWrites(t *testing.T) {
	e := newTxEnv(t, 4)
	req := CreditRequest{ID: "final-" + randHex(4), Amount: 2000}
	_, err := e.svc.Credit(t.Context(), req)
	require.ErrorIs(t, err, ErrLimit)
	assert.Empty(t, e.ledger.rows(t)[req.ID], "the business write is rolled back")
	assert.Equal(t, idem.StatusFailedFinal, e.record(req.ID))
	_, err = e.svc.Credit(t.Context(), req)
	require.ErrorIs(t, err, ErrLimit, "the final error is replayed")
	assert.Empty(t, e.ledger.rows(t)[req.ID])
}

// TestTxTransientRollsBack: a transient error rolls back the claim and the
// business write; the retry executes once and commits both.
func TestTxTransientRollsBack(t *testing.T) {
	e := newTxEnv(t, 4)
	req := CreditRequest{ID: "transient-" + randHex(4), Amount: 7}
	fail := true
	e.ledger.hook = func(context.Context, pgx.Tx) error {
		if fail {
			fail = false
			return errors.New("downstream timeout")
		}
		return nil
	}
	_, err := e.svc.Credit(t.Context(), req)
	require.EqualError(t, err, "downstream timeout")
	assert.Empty(t, e.ledger.rows(t)[req.ID])
	assert.Zero(t, e.record(req.ID), "no record is left behind")
	got, err := e.svc.Credit(t.Context(), req)
	require.NoError(t, err)
	again, err := e.svc.Credit(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, got, again)
	assert.Len(t, e.ledger.rows(t)[req.ID], 1)
}

// TestTxDuplicateWaits: a duplicate waits on the open transaction, then
// replays its committed outcome; if it rolls back, the duplicate runs.
func TestTxDuplicateWaits(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			e := newTxEnv(t, 4)
			req := CreditRequest{ID: "wait-" + randHex(4), Amount: 3}
			inside, finish := make(chan struct{}), make(chan struct{})
			calls := 0
			e.ledger.hook = func(context.Context, pgx.Tx) error {
				calls++
				if calls == 1 {
					close(inside)
					<-finish
					if !commit {
						return errors.New("transient")
					}
				}
				return nil
			}
			type res struct {
				e   Entry
				err error
			}
			first := make(chan res, 1)
			go func() {
				v, err := e.svc.Credit(context.Background(), req)
				first <- res{v, err}
			}()
			<-inside
			dup := make(chan res, 1)
			go func() {
				v, err := e.svc.Credit(context.Background(), req) // waits up to 5s
				dup <- res{v, err}
			}()
			select {
			case r := <-dup:
				t.Fatalf("the duplicate did not wait: %v %v", r.e, r.err)
			case <-time.After(200 * time.Millisecond):
			}
			close(finish)
			f, d := <-first, <-dup
			require.NoError(t, d.err)
			rows := e.ledger.rows(t)[req.ID]
			require.Len(t, rows, 1)
			assert.Equal(t, rows[0], d.e)
			if commit {
				require.NoError(t, f.err)
				assert.Equal(t, f.e, d.e, "the duplicate replays the first outcome")
				assert.Equal(t, 1, calls)
			} else {
				require.Error(t, f.err)
				assert.Equal(t, 2, calls, "after a rollback the duplicate runs the method")
			}
		})
	}
}

// TestTxNoWait: a duplicate whose method does not wait gets ErrInProgress
// within the lock timeout, and no wait is unbounded.
func TestTxNoWait(t *testing.T) {
	e := newTxEnv(t, 4)
	req := CreditRequest{ID: "nowait-" + randHex(4), Amount: 3}
	inside, finish := make(chan struct{}), make(chan struct{})
	e.ledger.hook = func(context.Context, pgx.Tx) error { close(inside); <-finish; return nil }
	m := idemLedgerCredit
	m.Wait = 0
	done := make(chan error, 1)
	go func() { _, err := e.svc.credit(context.Background(), &m, req); done <- err }()
	<-inside
	e.ledger.hook = nil
	start := time.Now()
	_, err := e.svc.credit(t.Context(), &m, req)
	require.ErrorIs(t, err, idem.ErrInProgress)
	assert.Less(t, time.Since(start), 10*time.Second, "it did not wait for the holder, which runs until the test lets it finish")
	m.Wait = 150 * time.Millisecond
	start = time.Now()
	_, err = e.svc.credit(t.Context(), &m, req)
	require.ErrorIs(t, err, idem.ErrInProgress)
	assert.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond, "waited for the lock timeout")
	close(finish)
	require.NoError(t, <-done)
	_, err = e.svc.credit(t.Context(), &m, req)
	require.NoError(t, err, "replayed once committed")
}

// TestTxTerminatedBackend: the connection of a running call is killed with
// pg_terminate_backend. Nothing is committed: no record, no business row;
// the retry executes once.
func TestTxTerminatedBackend(t *testing.T) {
	for _, notice := range []bool{true, false} {
		// notice: the method's next statement fails and it returns that
		// error; otherwise it returns success and the commit fails.
		name := map[bool]string{true: "method-sees-it", false: "commit-fails"}[notice]
		t.Run(name, func(t *testing.T) {
			e := newTxEnv(t, 4)
			req := CreditRequest{ID: "kill-" + randHex(4), Amount: 9}
			calls := 0
			e.ledger.hook = func(ctx context.Context, tx pgx.Tx) error {
				calls++
				if calls > 1 {
					return nil
				}
				var pid int
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				var ok bool
				if err := e.store.Pool().QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return errors.New("backend not terminated")
				}
				if notice {
					_, err := tx.Exec(ctx, "SELECT 1")
					return err
				}
				return nil
			}
			_, err := e.svc.Credit(t.Context(), req)
			require.Error(t, err, "the call did not happen")
			assert.Empty(t, e.ledger.rows(t)[req.ID], "no business row")
			assert.Zero(t, e.record(req.ID), "no record")

			got, err := e.svc.Credit(t.Context(), req)
			require.NoError(t, err, "the retry executes")
			again, err := e.svc.Credit(t.Context(), req)
			require.NoError(t, err)
			assert.Equal(t, got, again)
			assert.Equal(t, 2, calls, "the retry executed once; the next call replayed")
			assert.Len(t, e.ledger.rows(t)[req.ID], 1)
			assert.Equal(t, idem.StatusSucceeded, e.record(req.ID))
		})
	}
}

// TestTxFrom: the method's view of the transaction.
func TestTxFrom(t *testing.T) {
	e := newTxEnv(t, 4)
	_, ok := pgstore.TxFrom(t.Context())
	assert.False(t, ok, "no transaction outside a call")
	var kept pgx.Tx
	e.ledger.hook = func(ctx context.Context, tx pgx.Tx) error {
		kept = tx
		var lt string
		require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt))
		assert.Equal(t, "0", lt, "the method runs under the connection's lock_timeout, not the claim's wait")
		assert.ErrorIs(t, tx.Commit(ctx), pgstore.ErrTxOwned)
		assert.ErrorIs(t, tx.Rollback(ctx), pgstore.ErrTxOwned)
		nested, err := tx.Begin(ctx) // a savepoint
		require.NoError(t, err)
		_, err = nested.Exec(ctx, "INSERT INTO "+e.ledger.table+" (id, amount) VALUES ('nested', 1)")
		require.NoError(t, err)
		require.NoError(t, nested.Rollback(ctx))
		return nil
	}
	_, err := e.svc.Credit(t.Context(), CreditRequest{ID: "txfrom-" + randHex(4), Amount: 1})
	require.NoError(t, err)
	assert.Empty(t, e.ledger.rows(t)["nested"], "the nested savepoint was rolled back")
	_, err = kept.Exec(t.Context(), "SELECT 1")
	assert.ErrorIs(t, err, pgx.ErrTxClosed, "the transaction is closed once the call is over")
}

// TestTxExpiry: an expired record behaves as absent in transactional mode
// too; concurrent replays of a live one do not queue on the key's lock.
func TestTxExpiry(t *testing.T) {
	e := newTxEnv(t, 20)
	m := idemLedgerCredit
	m.TTL, m.Lease, m.Wait = time.Hour, time.Minute, 0
	req := CreditRequest{ID: "expiry-" + randHex(4), Amount: 4}
	first, err := e.svc.credit(t.Context(), &m, req)
	require.NoError(t, err)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			v, err := e.svc.credit(context.Background(), &m, req)
			if err == nil && v != first {
				err = errors.New("replayed another entry")
			}
			errs <- err
		}()
	}
	for range 16 {
		require.NoError(t, <-errs, "concurrent replays, none in progress")
	}
	timeTravel(t, e.store.Pool(), e.store.Table())(m.TTL + time.Second)
	second, err := e.svc.credit(t.Context(), &m, req)
	require.NoError(t, err)
	assert.NotEqual(t, first.Row, second.Row, "past its TTL the record is absent: the method runs again")
	assert.Len(t, e.ledger.rows(t)[req.ID], 2)
}
