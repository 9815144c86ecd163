package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestConformance runs the store conformance suite in lease mode against the
// real server, on the real clock.
func TestConformance(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	idemtest.Run(t, idemtest.Options{
		NewStore: func(t *testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) },
	})
}

// TestConformanceTx runs the suite in transactional mode: the executor's
// cases go through ClaimTx, and a stalled claim (an open transaction) is
// refused instead of taken over.
func TestConformanceTx(t *testing.T) {
	pool := newPool(t, 80, nil)
	table := newTable(t, pool)
	idemtest.Run(t, idemtest.Options{
		NewStore:      func(t *testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) },
		Transactional: true,
	})
}
