package mysqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
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
	tables := caseTables{db: db, byCase: map[string]string{}}
	down, unmigrated := unusable(db, newStore)
	var breakTx func(context.Context) error
	if tx {
		breakTx = mysqlenv.BreakTx(db)
	}
	idemtest.Run(t, idemtest.Options{
		NewStore:      func(t *testing.T) idem.Store { return newStore(db, mysqlstore.WithTable(tables.of(t))) },
		Transactional: tx,
		Sleep:         tables.travel(t),
		Unit:          conformanceUnit,
		Sweep:         sweepOf,
		Down:          down,
		Unmigrated:    unmigrated,
		BreakTx:       breakTx,
	})
}

// caseTables gives every case of the suite a table of its own (its
// subtests share it), dropped when the case ends: no case sees another's
// records (Sweep counts what expired in the whole table, and records of
// earlier cases expire by the real clock meanwhile), and time travel moves
// only the rows of the case that runs (cases run one at a time when the
// suite has a Sleep).
type caseTables struct {
	db     *sql.DB
	mu     sync.Mutex
	byCase map[string]string // top-level case name → table
}

func (c *caseTables) of(t *testing.T) string {
	name := t.Name()
	if parts := strings.SplitN(name, "/", 3); len(parts) >= 2 {
		name = parts[0] + "/" + parts[1]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if table, ok := c.byCase[name]; ok {
		return table
	}
	table := newTable(t, c.db)
	c.byCase[name] = table
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.byCase, name)
		c.mu.Unlock()
	})
	return table
}

// travel is idemtest's Options.Sleep: d passes on the store's clock for
// every table in use.
func (c *caseTables) travel(t *testing.T) func(time.Duration) {
	return func(d time.Duration) {
		c.mu.Lock()
		tables := make([]string, 0, len(c.byCase))
		for _, table := range c.byCase {
			tables = append(tables, table)
		}
		c.mu.Unlock()
		for _, table := range tables {
			timeTravel(t, c.db, table)(d)
		}
	}
}
