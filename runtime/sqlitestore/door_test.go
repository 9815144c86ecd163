package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// TestDoorConformance runs idemhttp's shared suite (idemhttptest) through
// net/http on sqlitestore, in lease and in transactional mode, a database
// file of each test's own: the HTTP door's semantics and issue 33's
// tenancy table (TenantDoorToRecord, TenantScope, TenantBusinessKeyInFlight,
// TenantPassThrough: two tenants from the door to the record) on the one
// store that everystore, in the runtime's module, cannot reach. The door's
// claim and the wrapper's below it share one transaction
// (TxStore.ClaimNested).
func TestDoorConformance(t *testing.T) {
	t.Run("Lease", func(t *testing.T) {
		idemhttptest.Run(t, idemhttptest.Options{
			NewStore: func(t *testing.T) idem.Store { db, _ := openDB(t); return sqlitestore.New(db) },
			Mount:    idemhttptest.NetHTTP,
		})
	})
	// One writer: a call's transaction holds the write lock while its
	// handler runs, and the suite's second call in flight is refused once
	// the lock timeout passes (short here; no assertion is on time).
	t.Run("Tx", func(t *testing.T) {
		idemhttptest.Run(t, idemhttptest.Options{
			NewStore: func(t *testing.T) idem.Store {
				db, _ := openDB(t)
				return sqlitestore.NewTx(db, sqlitestore.WithLockTimeout(50*time.Millisecond))
			},
			Mount:     idemhttptest.NetHTTP,
			OneWriter: true,
		})
	})
}
