package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// ErrNoClaimTx is returned by BeginTx with a nil database when ctx belongs
// to no call in transactional mode.
var ErrNoClaimTx = errors.New("mysqlstore: no idempotency transaction in the context, and no database to begin one on")

// Unit is a unit of work begun by BeginTx: a savepoint in the transaction
// of the idempotent call ctx belongs to, or a transaction of its own. It has
// the methods of sqlc's DBTX (ExecContext, PrepareContext, QueryContext,
// QueryRowContext), Commit and Rollback. It is not safe for concurrent use.
type Unit struct {
	tx   *sql.Tx // a transaction of its own, or nil
	call *Tx     // the call's transaction, for a savepoint
	sp   string  // the savepoint's name in call
	over bool
}

// BeginTx begins the unit of work of a method's own writes, for code
// written as a transaction of its own (sqlc's Queries.WithTx):
//
//   - inside a call run by an executor on a TxStore (TxFrom finds its
//     transaction), a savepoint in that transaction: its Commit releases
//     the savepoint, and its writes commit with the call's outcome or not at
//     all; its Rollback undoes them alone;
//   - elsewhere (the unwrapped service, a test, a lease-mode store), a
//     transaction of its own on db, committed by its Commit; with db nil,
//     ErrNoClaimTx, for code that must run under a claim.
//
// Either way the caller commits on success and defers Rollback (which does
// nothing after Commit).
func BeginTx(ctx context.Context, db *sql.DB) (*Unit, error) {
	if call, ok := TxFrom(ctx); ok {
		// Numbered per transaction: MySQL replaces a savepoint of the
		// same name, so units nested in one call never share one.
		sp := "idem_unit_" + strconv.FormatUint(call.units.Add(1), 10)
		if _, err := call.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			return nil, fmt.Errorf("mysqlstore: savepoint in the idempotency transaction: %w", err)
		}
		return &Unit{call: call, sp: sp}, nil
	}
	if db == nil {
		return nil, ErrNoClaimTx
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: begin: %w", err)
	}
	return &Unit{tx: tx}, nil
}

// ExecContext runs a statement in the unit.
func (u *Unit) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if u.tx != nil {
		return u.tx.ExecContext(ctx, query, args...)
	}
	return u.call.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the unit.
func (u *Unit) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if u.tx != nil {
		return u.tx.QueryContext(ctx, query, args...)
	}
	return u.call.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query that returns at most one row in the unit.
func (u *Unit) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if u.tx != nil {
		return u.tx.QueryRowContext(ctx, query, args...)
	}
	return u.call.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement in the unit.
func (u *Unit) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if u.tx != nil {
		return u.tx.PrepareContext(ctx, query)
	}
	return u.call.PrepareContext(ctx, query)
}

// Commit commits a transaction of its own, or releases the savepoint (the
// writes then commit with the call's outcome, or not at all). A second
// Commit, or one after Rollback, returns sql.ErrTxDone.
func (u *Unit) Commit() error {
	if u.over {
		return sql.ErrTxDone
	}
	u.over = true
	if u.tx != nil {
		return u.tx.Commit()
	}
	_, err := u.call.ExecContext(context.Background(), "RELEASE SAVEPOINT "+u.sp)
	return err
}

// Rollback rolls back a transaction of its own, or the unit's writes in
// the call's transaction (to the savepoint, which it releases); after
// Commit it does nothing and returns sql.ErrTxDone.
func (u *Unit) Rollback() error {
	if u.over {
		return sql.ErrTxDone
	}
	u.over = true
	if u.tx != nil {
		return u.tx.Rollback()
	}
	return undoSavepoint(context.Background(), u.call.tx, u.sp)
}
