package billing

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// MySQLLedgerSchema creates the MySQLLedger tables, one statement each; it
// is safe to run more than once.
var MySQLLedgerSchema = []string{
	`CREATE TABLE IF NOT EXISTS billing_accounts (
    customer VARCHAR(64) NOT NULL PRIMARY KEY,
    balance  BIGINT      NOT NULL,
    CONSTRAINT billing_balance_chk CHECK (balance >= 0)
) ENGINE = InnoDB`,
	`CREATE TABLE IF NOT EXISTS billing_moves (
    id       BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id VARCHAR(64) NOT NULL,
    customer VARCHAR(64) NOT NULL,
    amount   BIGINT      NOT NULL
) ENGINE = InnoDB`,
	`CREATE TABLE IF NOT EXISTS billing_points (
    order_id VARCHAR(64) NOT NULL PRIMARY KEY,
    points   BIGINT      NOT NULL
) ENGINE = InnoDB`,
}

// MySQLLedger is a Ledger in MySQL or MariaDB. Inside a method wrapped on a
// transactional mysqlstore (mysqlstore.NewTx), it writes through the
// transaction that holds the idempotency record (mysqlstore.TxFrom), under
// a savepoint of each operation, so the money moves if and only if the
// outcome is committed; elsewhere each operation is a transaction of its
// own on the database.
type MySQLLedger struct {
	db *sql.DB
}

// NewMySQLLedger returns a ledger on db; call Setup once.
func NewMySQLLedger(db *sql.DB) *MySQLLedger { return &MySQLLedger{db: db} }

// Setup creates the tables and sets the opening balances.
func (l *MySQLLedger) Setup(ctx context.Context, balances map[string]int64) error {
	for _, s := range MySQLLedgerSchema {
		if _, err := l.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("ledger schema: %w", err)
		}
	}
	for c, b := range balances {
		if _, err := l.db.ExecContext(ctx,
			`INSERT INTO billing_accounts (customer, balance) VALUES (?, ?)
			 ON DUPLICATE KEY UPDATE balance = VALUES(balance)`, c, b); err != nil {
			return fmt.Errorf("ledger balance of %s: %w", c, err)
		}
	}
	return nil
}

// dbtx is what an operation runs its statements on.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// unit is one ledger operation's unit of work: a savepoint of the
// idempotent call's transaction, or a transaction of its own.
type unit struct {
	dbtx
	commit   func() error
	rollback func()
}

// begin starts the unit of work of one ledger operation. The caller commits
// it and defers its rollback (a no-op after the commit).
func (l *MySQLLedger) begin(ctx context.Context) (*unit, error) {
	if tx, ok := mysqlstore.TxFrom(ctx); ok {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT billing_op"); err != nil {
			return nil, err
		}
		done := false
		return &unit{dbtx: tx,
			commit: func() error {
				done = true
				_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT billing_op")
				return err
			},
			rollback: func() {
				if !done {
					_, _ = tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT billing_op")
				}
			}}, nil
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &unit{dbtx: tx, commit: tx.Commit, rollback: func() { _ = tx.Rollback() }}, nil
}

// Debit implements Ledger.
func (l *MySQLLedger) Debit(ctx context.Context, customer, order string, amount int64) (string, int64, error) {
	u, err := l.begin(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	defer u.rollback()
	res, err := u.ExecContext(ctx,
		`UPDATE billing_accounts SET balance = balance - ? WHERE customer = ? AND balance >= ?`, amount, customer, amount)
	if err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return "", 0, fmt.Errorf("debit: %w", err)
		}
		return "", 0, ErrInsufficientFunds
	}
	var balance int64
	if err := u.QueryRowContext(ctx, `SELECT balance FROM billing_accounts WHERE customer = ?`, customer).Scan(&balance); err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	id, err := l.move(ctx, u, order, customer, -amount)
	if err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	if err := u.commit(); err != nil {
		return "", 0, fmt.Errorf("debit: %w", err)
	}
	return fmt.Sprintf("pay_%04d", id), balance, nil
}

// move records a move of money and returns its ID.
func (l *MySQLLedger) move(ctx context.Context, u *unit, order, customer string, amount int64) (int64, error) {
	res, err := u.ExecContext(ctx, `INSERT INTO billing_moves (order_id, customer, amount) VALUES (?, ?, ?)`,
		order, customer, amount)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// Credit implements Ledger.
func (l *MySQLLedger) Credit(ctx context.Context, customer, order string, amount int64) (string, error) {
	u, err := l.begin(ctx)
	if err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	defer u.rollback()
	if _, err := u.ExecContext(ctx, `UPDATE billing_accounts SET balance = balance + ? WHERE customer = ?`, amount, customer); err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	id, err := l.move(ctx, u, order, customer, amount)
	if err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	if err := u.commit(); err != nil {
		return "", fmt.Errorf("credit: %w", err)
	}
	return fmt.Sprintf("ref_%04d", id), nil
}

// AddPoints implements Ledger.
func (l *MySQLLedger) AddPoints(ctx context.Context, order string, points int) error {
	u, err := l.begin(ctx)
	if err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	defer u.rollback()
	if _, err := u.ExecContext(ctx,
		`INSERT INTO billing_points (order_id, points) VALUES (?, ?)
		 ON DUPLICATE KEY UPDATE points = points + VALUES(points)`, order, points); err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	if err := u.commit(); err != nil {
		return fmt.Errorf("add points: %w", err)
	}
	return nil
}

// Moves returns how many times money moved for order (committed rows).
func (l *MySQLLedger) Moves(ctx context.Context, order string) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM billing_moves WHERE order_id = ?`, order).Scan(&n)
	return n, err
}

// Points returns the loyalty points of order.
func (l *MySQLLedger) Points(ctx context.Context, order string) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(points), 0) FROM billing_points WHERE order_id = ?`, order).Scan(&n)
	return n, err
}
