package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// LedgerSchema creates the PGLedger tables; it is safe to run more than once.
const LedgerSchema = `
CREATE TABLE IF NOT EXISTS billing_accounts (
    customer text PRIMARY KEY,
    balance  bigint NOT NULL CHECK (balance >= 0)
);
CREATE TABLE IF NOT EXISTS billing_moves (
    id       bigserial PRIMARY KEY,
    order_id text   NOT NULL,
    customer text   NOT NULL,
    amount   bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS billing_points (
    order_id text PRIMARY KEY,
    points   bigint NOT NULL
);`

// PGLedger is a Ledger in PostgreSQL. Inside a method wrapped on a
// transactional pgstore (pgstore.NewTx), it writes through the transaction
// that holds the idempotency record, so the money moves if and only if the
// outcome is committed; elsewhere each operation is a transaction of its
// own on the pool (see begin).
type PGLedger struct {
	pool *pgxpool.Pool
}

// NewPGLedger returns a ledger on pool; call Setup once.
func NewPGLedger(pool *pgxpool.Pool) *PGLedger { return &PGLedger{pool: pool} }

// Setup creates the tables and sets the opening balances.
func (l *PGLedger) Setup(ctx context.Context, balances map[string]int64) error {
	if _, err := l.pool.Exec(ctx, LedgerSchema); err != nil {
		return fmt.Errorf("ledger schema: %w", err)
	}
	for c, b := range balances {
		if _, err := l.pool.Exec(ctx,
			`INSERT INTO billing_accounts (customer, balance) VALUES ($1, $2)
			 ON CONFLICT (customer) DO UPDATE SET balance = excluded.balance`, c, b); err != nil {
			return fmt.Errorf("ledger balance of %s: %w", c, err)
		}
	}
	return nil
}

// begin starts the unit of work of one ledger operation, explicitly in one
// of two ways (pgstore.BeginTx): inside a method wrapped on a transactional
// pgstore, a savepoint of the transaction that holds the idempotency record
// (the money moves if and only if the outcome commits); elsewhere (the
// unwrapped service, a lease-mode store), a transaction of its own on the
// pool, so that the operation's statements still commit together. The
// caller commits it and defers its Rollback.
func (l *PGLedger) begin(ctx context.Context) (pgx.Tx, error) {
	return pgstore.BeginTx(ctx, l.pool)
}

// Debit implements Ledger.
func (l *PGLedger) Debit(ctx context.Context, customer, order string, amount int64) (string, int64, error) {
	db, err := l.begin(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	defer func() { _ = db.Rollback(ctx) }() // nothing after Commit
	var balance int64
	err = db.QueryRow(ctx,
		`UPDATE billing_accounts SET balance = balance - $2 WHERE customer = $1 AND balance >= $2 RETURNING balance`,
		customer, amount).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrInsufficientFunds
	}
	if err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	var id int64
	if err := db.QueryRow(ctx,
		`INSERT INTO billing_moves (order_id, customer, amount) VALUES ($1, $2, $3) RETURNING id`,
		order, customer, -amount).Scan(&id); err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	if err := db.Commit(ctx); err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	return fmt.Sprintf("pay_%04d", id), balance, nil
}

// Credit implements Ledger.
func (l *PGLedger) Credit(ctx context.Context, customer, order string, amount int64) (string, error) {
	db, err := l.begin(ctx)
	if err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	defer func() { _ = db.Rollback(ctx) }()
	if _, err := db.Exec(ctx, `UPDATE billing_accounts SET balance = balance + $2 WHERE customer = $1`, customer, amount); err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	var id int64
	if err := db.QueryRow(ctx,
		`INSERT INTO billing_moves (order_id, customer, amount) VALUES ($1, $2, $3) RETURNING id`,
		order, customer, amount).Scan(&id); err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	if err := db.Commit(ctx); err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	return fmt.Sprintf("ref_%04d", id), nil
}

// AddPoints implements Ledger.
func (l *PGLedger) AddPoints(ctx context.Context, order string, points int) error {
	db, err := l.begin(ctx)
	if err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	defer func() { _ = db.Rollback(ctx) }()
	if _, err := db.Exec(ctx,
		`INSERT INTO billing_points (order_id, points) VALUES ($1, $2)
		 ON CONFLICT (order_id) DO UPDATE SET points = billing_points.points + excluded.points`, order, points); err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	if err := db.Commit(ctx); err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	return nil
}

// Moves returns how many times money moved for order (committed rows).
func (l *PGLedger) Moves(ctx context.Context, order string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM billing_moves WHERE order_id = $1`, order).Scan(&n)
	return n, err
}

// Points returns the loyalty points of order.
func (l *PGLedger) Points(ctx context.Context, order string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT coalesce(sum(points), 0) FROM billing_points WHERE order_id = $1`, order).Scan(&n)
	return n, err
}
