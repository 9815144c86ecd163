package mysqlstore_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// conformanceUnit is the suite's lease. The store's clock is advanced by
// moving the table's instants into the past (timeTravel) instead of
// sleeping, so no lease lapses or record expires by the speed of a loaded
// machine.
const conformanceUnit = time.Second

// TestConformance runs the store conformance suite in lease mode against the
// real server, its clock advanced by timeTravel.
func TestConformance(t *testing.T) { conformance(t, newLease, false) }

// TestConformanceTx runs the suite in transactional mode: the executor's
// cases go through ClaimTx, and a stalled claim (an open transaction) is
// refused instead of taken over.
func TestConformanceTx(t *testing.T) { conformance(t, newTx, true) }

func conformance(t *testing.T, newStore func(*sql.DB, ...mysqlstore.Option) idem.Store, tx bool) {
	db := newDB(t, 80)
	table := newTable(t, db)
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	down, unmigrated := unusable(db, newStore)
	idemtest.Run(t, idemtest.Options{
		NewStore:      func(t *testing.T) idem.Store { return newStore(db, mysqlstore.WithTable(table)) },
		Transactional: tx,
		Sleep:         timeTravel(t, db, s.Table()),
		Unit:          conformanceUnit,
		Sweep:         sweepOf,
		Down:          down,
		Unmigrated:    unmigrated,
	})
}
