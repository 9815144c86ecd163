package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

func sweepOf(ctx context.Context, s idem.Store, limit int) (int, error) {
	switch s := s.(type) {
	case *sqlitestore.Store:
		return s.Sweep(ctx, limit)
	case *sqlitestore.TxStore:
		return s.Sweep(ctx, limit)
	}
	panic("not a sqlitestore")
}

// TestConformance runs the store conformance suite in lease mode on a
// database file of each subtest's own, its clock advanced by a fake clock.
func TestConformance(t *testing.T) {
	var clock fakeClock
	idemtest.Run(t, idemtest.Options{
		NewStore: func(t *testing.T) idem.Store {
			db, _ := openDB(t)
			return sqlitestore.New(db, clock.option())
		},
		Sleep:      clock.Sleep,
		Unit:       time.Second,
		Sweep:      sweepOf,
		Down:       func(t *testing.T) idem.Store { return sqlitestore.New(closedDB(t)) },
		Unmigrated: func(t *testing.T) idem.Store { return sqlitestore.New(unmigratedDB(t)) },
	})
}

// TestConformanceTx runs the suite in transactional mode: the executor's
// cases go through ClaimTx, and a stalled claim (an open transaction) is
// refused instead of taken over.
func TestConformanceTx(t *testing.T) {
	var clock fakeClock
	idemtest.Run(t, idemtest.Options{
		NewStore: func(t *testing.T) idem.Store {
			db, _ := openDB(t)
			return sqlitestore.NewTx(db, clock.option())
		},
		Transactional: true,
		Sleep:         clock.Sleep,
		Unit:          time.Second,
		Sweep:         sweepOf,
		Down:          func(t *testing.T) idem.Store { return sqlitestore.NewTx(closedDB(t)) },
		Unmigrated:    func(t *testing.T) idem.Store { return sqlitestore.NewTx(unmigratedDB(t)) },
	})
}

// unmigratedDB is a database file that was never migrated.
func unmigratedDB(t *testing.T) *sql.DB {
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "unmigrated.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// closedDB is a migrated database that was closed: a store that cannot be
// used, as a server that is down is for the other stores.
func closedDB(t *testing.T) *sql.DB {
	db, _ := openDB(t)
	require.NoError(t, db.Close())
	return db
}
