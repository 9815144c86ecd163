package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Ledger is the business service of the tests: Credit writes one row into a
// business table, through the idempotency transaction when there is one
// (transactional mode) and through the pool otherwise (lease mode).
type Ledger struct {
	pool  *pgxpool.Pool
	table string // sanitized

	// hook, when set, runs inside Credit after the business row is written.
	hook func(ctx context.Context, tx pgx.Tx) error
}

// CreditRequest is Credit's payload.
type CreditRequest struct {
	ID     string
	Amount int64
}

// Entry is Credit's result: the business row.
type Entry struct {
	Row    int64
	ID     string
	Amount int64
}

var ErrLimit = errors.New("ledger: over the limit")

func newLedger(t testing.TB, pool *pgxpool.Pool) *Ledger {
	t.Helper()
	name := pgx.Identifier{"ledger_" + randHex(6)}.Sanitize()
	_, err := pool.Exec(context.Background(),
		"CREATE TABLE "+name+" (row bigserial PRIMARY KEY, id text NOT NULL, amount bigint NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return &Ledger{pool: pool, table: name}
}

// Credit records a credit. Amounts over 1000 are a final business error,
// after the row was written (the write must then be discarded).
func (l *Ledger) Credit(ctx context.Context, req CreditRequest) (Entry, error) {
	var db interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	} = l.pool
	tx, inTx := pgstore.TxFrom(ctx)
	if inTx {
		db = tx
	}
	e := Entry{ID: req.ID, Amount: req.Amount}
	err := db.QueryRow(ctx, "INSERT INTO "+l.table+" (id, amount) VALUES ($1, $2) RETURNING row", req.ID, req.Amount).Scan(&e.Row)
	if err != nil {
		return Entry{}, err
	}
	if l.hook != nil {
		if err := l.hook(ctx, tx); err != nil {
			return Entry{}, err
		}
	}
	if req.Amount > 1000 {
		return Entry{}, fmt.Errorf("credit %s: %w", req.ID, ErrLimit)
	}
	return e, nil
}

// rows returns the business rows by id.
func (l *Ledger) rows(t testing.TB) map[string][]Entry {
	t.Helper()
	rows, err := l.pool.Query(context.Background(), "SELECT row, id, amount FROM "+l.table)
	require.NoError(t, err)
	got := map[string][]Entry{}
	for rows.Next() {
		var e Entry
		require.NoError(t, rows.Scan(&e.Row, &e.ID, &e.Amount))
		got[e.ID] = append(got[e.ID], e)
	}
	require.NoError(t, rows.Err())
	return got
}

// IdempotentLedger is what idemgen generates for
//
//	//idem:key=req.ID ttl=1m lease=30s inflight=wait:5s final=ErrLimit
//	func (l *Ledger) Credit(ctx context.Context, req CreditRequest) (Entry, error)
type IdempotentLedger struct {
	*Ledger
	ex *idem.Executor
}

func NewIdempotentLedger(next *Ledger, ex *idem.Executor) *IdempotentLedger {
	return &IdempotentLedger{Ledger: next, ex: ex}
}

var idemLedgerCredit = idem.Method{
	Op:    "Ledger.Credit",
	TTL:   time.Minute,
	Lease: 30 * time.Second,
	Wait:  5 * time.Second,
	Final: []idem.FinalError{{Name: "ErrLimit", Err: ErrLimit}},
}

func (w *IdempotentLedger) Credit(ctx context.Context, req CreditRequest) (Entry, error) {
	return w.credit(ctx, &idemLedgerCredit, req)
}

// credit is Credit with another annotation, for tests that change the lease
// or the wait.
func (w *IdempotentLedger) credit(ctx context.Context, m *idem.Method, req CreditRequest) (Entry, error) {
	var k idem.KeyParts
	k.String("req.ID", req.ID)
	var h idem.Hasher
	h.Value(req)
	return idem.Do(ctx, w.ex, m, &k, &h, func(ctx context.Context) (Entry, error) {
		return w.Ledger.Credit(ctx, req)
	})
}
