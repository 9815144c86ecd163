package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Beginner starts a transaction: *pgxpool.Pool, *pgx.Conn and pgx.Tx (a
// savepoint) are Beginners.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrNoClaimTx is returned by BeginTx with a nil Beginner when ctx belongs
// to no call in transactional mode.
var ErrNoClaimTx = errors.New("pgstore: no idempotency transaction in the context, and no database to begin one on")

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
// nothing after Commit), as for any pgx transaction.
func BeginTx(ctx context.Context, db Beginner) (pgx.Tx, error) {
	if tx, ok := TxFrom(ctx); ok {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgstore: savepoint in the idempotency transaction: %w", err)
		}
		return sp, nil
	}
	if db == nil {
		return nil, ErrNoClaimTx
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	return tx, nil
}
