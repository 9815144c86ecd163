package idemhttp_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// pgTable is a pgstore table of the test's own on the test server
// (testenv.PGStoreTable).
func pgTable(t *testing.T) (*pgxpool.Pool, string) { return testenv.PGStoreTable(t, "idemhttp_test_") }

// TestPostgres runs the suite on pgstore in lease mode.
func TestPostgres(t *testing.T) {
	pool, table := pgTable(t)
	runSuite(t, func(*testing.T) idem.Store { return pgstore.New(pool, pgstore.WithTable(table)) })
}

// TestPostgresTx runs the suite on pgstore in transactional mode: the claim,
// the handler and its stored response commit together.
func TestPostgresTx(t *testing.T) {
	pool, table := pgTable(t)
	runSuite(t, func(*testing.T) idem.Store { return pgstore.NewTx(pool, pgstore.WithTable(table)) })
}
